"""Categories, groups and their users over real HTTP, including ids that need percent-encoding."""

from __future__ import annotations

import pytest
from simtools import all_pages, enc, flatten

from simulator.names import DECOY_USER_ID, SPECIAL_GROUPS, SPECIAL_LESSON_IDS, SPECIAL_USER_IDS


def test_categories(sim, client) -> None:
    categories = client.get("/v1/categories").json()
    assert categories == list(sim.ground_truth("categories"))
    assert {c["ownerID"] for c in categories} == {sim.world.owner_id}
    assert any("description" not in c for c in categories) and any("description" in c for c in categories)


def test_groups_listing_search_and_include_disabled(sim, client) -> None:
    truth = list(sim.ground_truth("groups"))
    everything = flatten(all_pages(client, "/v1/groups", {"includeDisabled": "true"}, page_size=6))
    assert everything == truth
    enabled = flatten(all_pages(client, "/v1/groups", page_size=6))
    assert enabled == [g for g in truth if not g["disabled"]] and len(enabled) < len(truth)
    found = client.get("/v1/groups", params={"search": "PARIS #1"}).json()
    assert [g["uniqueName"] for g in found] == ["Ventes / Paris #1 ?été"]
    assert client.get("/v1/groups", params={"includeDisabled": "sometimes"}).status_code == 400
    assert all(g["nbUser"] >= g["nbActiveUser"] for g in truth)


@pytest.mark.parametrize(("group_id", "unique_name", "_title"), SPECIAL_GROUPS)
def test_group_by_id_and_by_unique_name_with_reserved_characters(client, group_id, unique_name, _title) -> None:
    by_id = client.get(f"/v1/groups/{enc(group_id)}")
    by_name = client.get(f"/v1/groups/name/{enc(unique_name)}")
    assert by_id.status_code == by_name.status_code == 200
    assert by_id.json() == by_name.json() and by_id.json()["id"] == group_id
    members = client.get(f"/v1/groups/{enc(group_id)}/users", params={"pageSize": "1000"}).json()
    assert members == client.get(f"/v1/groups/name/{enc(unique_name)}/users", params={"pageSize": "1000"}).json()


def test_group_errors(client) -> None:
    assert client.get("/v1/groups/no-such-group").status_code == 404
    assert client.get("/v1/groups/name/no-such-name/users").status_code == 404
    assert client.get("/v1/groups/grp/ventes#1 ?été").status_code == 404  # unencoded: not that group
    for bad in ("%FF%FE", "%20%20", "%01x"):
        response = client.get(f"/v1/groups/{bad}")
        assert response.status_code == 400 and response.json()["kind"] == "bad_request"
        assert client.get(f"/v1/groups/name/{bad}").status_code == 400


def test_group_users_include_disabled_and_search(sim, client) -> None:
    world = sim.world
    truth = list(sim.ground_truth("group_members"))
    for g, group in enumerate(world.directory.groups):
        listed = flatten(
            all_pages(client, f"/v1/groups/{enc(group['id'])}/users", {"includeDisabled": "true"}, page_size=4)
        )
        assert listed == [{k: v for k, v in m.items() if k != "groupId"} for m in truth if m["groupId"] == group["id"]]
        visible = client.get(f"/v1/groups/{enc(group['id'])}/users", params={"pageSize": "1000"}).json()
        hidden = [u for u in world.directory.members[g] if world.directory.user_disabled[u]]
        assert len(visible) == len(listed) - len(hidden)
    users = list(sim.ground_truth("users"))
    assert len({u["id"] for u in users}) == len(users) < len(truth)  # users in several groups appear once
    member = users[3]
    group_id = next(m["groupId"] for m in truth if m["id"] == member["id"])
    found = client.get(
        f"/v1/groups/{enc(group_id)}/users", params={"search": member["login"].upper(), "includeDisabled": "true"}
    ).json()
    assert member in found


def test_reserved_characters_address_the_right_user_and_lesson(sim, client) -> None:
    for user_id in SPECIAL_USER_IDS:
        rows = client.get(f"/v1/users/{enc(user_id)}/active-lessons", params={"pageSize": "1000"}).json()
        assert rows and {r["_userId"] for r in rows} == {user_id}
        answers = client.get(f"/v1/users/{enc(user_id)}/answers", params={"pageSize": "1000"}).json()
        assert answers and {a["_userId"] for a in answers} == {user_id}
    for lesson_id in SPECIAL_LESSON_IDS:
        rows = client.get(f"/v1/lessons/{enc(lesson_id)}/active-lessons", params={"pageSize": "1000"}).json()
        assert rows and {r["_lessonId"] for r in rows} == {lesson_id}
    # '%41' left unencoded reaches the server as 'A': the decoy user answers instead
    trap = client.get("/v1/users/anne%41b/active-lessons", params={"pageSize": "1000"}).json()
    assert trap and {r["_userId"] for r in trap} == {DECOY_USER_ID}
