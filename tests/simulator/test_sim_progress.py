"""Active-lesson and answer listings over real HTTP: every variant, pagination edges, filters, order."""

from __future__ import annotations

from collections import Counter

import pytest
from simtools import all_pages, api_client, enc, flatten

from simulator import SimulatorConfig, start_simulator

BOTH = {"includeArchived": "true", "includeEntryQuiz": "true"}


def _answer_key(a: dict) -> tuple:  # type: ignore[type-arg]
    return (a["_activeLessonId"], a["quizType"], a["attemptIndex"], a["_questionId"])


def test_all_active_lessons_page_to_the_ground_truth(sim, client) -> None:
    truth = list(sim.ground_truth("active_lessons"))
    pages = all_pages(client, "/v1/active-lessons", page_size=64)
    served = flatten(pages)
    assert len(pages) == len(truth) // 64 + 1 and 0 < len(pages[-1]) < 64  # the last page is short
    key = lambda r: (r["_userId"], r["_lessonId"])  # noqa: E731
    assert sorted(served, key=key) == sorted(truth, key=key)
    assert len({key(r) for r in served}) == len(served)  # (owner, user, lesson) is unique
    dates = [(r["lastDate"]) for r in served]
    assert dates == sorted(dates)  # default order: by lastDate


def test_pagination_edges(sim, client) -> None:
    total = sim.world.store.n
    last = client.get("/v1/active-lessons", params={"pageSize": "100", "pageNumber": str(total // 100 + 1)})
    assert len(last.json()) == total % 100
    past = client.get("/v1/active-lessons", params={"pageSize": "100", "pageNumber": "99999"})
    assert past.status_code == 200 and past.json() == []
    assert len(client.get("/v1/active-lessons").json()) == 100  # default page size
    assert client.get("/v1/active-lessons", params={"pageSize": "1000"}).status_code == 200


@pytest.mark.parametrize(
    "path",
    ["/v1/active-lessons", "/v1/lessons/{lesson}/answers", "/v1/groups", "/v1/users/{user}/answers", "/v1/lessons"],
)
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("pageSize", "0"),
        ("pageSize", "-5"),
        ("pageSize", "abc"),
        ("pageSize", "1001"),
        ("pageSize", "2.5"),
        ("pageSize", ""),
        ("pageNumber", "0"),
        ("pageNumber", "-1"),
        ("pageNumber", "x"),
        ("pageNumber", "9" * 40),
    ],
)
def test_invalid_pagination_is_400(sim, client, path: str, name: str, value: str) -> None:
    url = path.format(lesson=enc(sim.world.catalog.lesson_ids[0]), user=enc(sim.world.users[0]["id"]))
    response = client.get(url, params={name: value})
    assert response.status_code == 400
    body = response.json()
    assert body["statusCode"] == 400 and body["kind"] == "bad_request" and name in body["message"]


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"updatedSince": "yesterday"}, "updatedSince"),
        ({"updatedSince": "2026-10-01T00:00:00"}, "offset"),
        ({"updatedSince": "2026-10-01T00:00:00 01:00"}, "%2B"),
        ({"includeArchived": "maybe"}, "includeArchived"),
        ({"includeEntryQuiz": "2"}, "includeEntryQuiz"),
    ],
)
def test_invalid_filters_are_400(sim, client, params: dict, needle: str) -> None:  # type: ignore[type-arg]
    lesson = enc(sim.world.catalog.lesson_ids[0])
    response = client.get(f"/v1/lessons/{lesson}/answers", params=params)
    assert response.status_code == 400 and needle in response.json()["message"]


def test_first_page_zero_is_configurable() -> None:
    with start_simulator(SimulatorConfig(scale="tiny", first_page=0)) as sim, api_client(sim) as client:
        page0 = client.get("/v1/active-lessons", params={"pageSize": "10", "pageNumber": "0"}).json()
        page1 = client.get("/v1/active-lessons", params={"pageSize": "10", "pageNumber": "1"}).json()
        assert len(page0) == len(page1) == 10 and page0 != page1
        assert client.get("/v1/active-lessons", params={"pageNumber": "-1"}).status_code == 400


def test_key_order_is_insertion_order() -> None:
    with start_simulator(SimulatorConfig(scale="tiny", order="key")) as sim, api_client(sim) as client:
        served = flatten(all_pages(client, "/v1/active-lessons", page_size=100))
        truth = list(sim.ground_truth("active_lessons"))  # exported in insertion order
        assert served == truth


def test_updated_since_is_inclusive_and_accepts_offsets(sim, client) -> None:
    truth = sorted(sim.ground_truth("active_lessons"), key=lambda r: r["lastDate"])
    pivot = truth[len(truth) // 2]["lastDate"]  # e.g. 2026-06-01T10:00:00.123Z
    expected = [r for r in truth if r["lastDate"] >= pivot]
    served = flatten(all_pages(client, "/v1/active-lessons", {"updatedSince": pivot}, page_size=1000))
    assert len(served) == len(expected) and served[0]["lastDate"] == pivot
    as_offset = pivot.replace("Z", "+00:00")
    again = client.get("/v1/active-lessons", params={"updatedSince": as_offset, "pageSize": "1000"}).json()
    assert again == served
    future = client.get("/v1/active-lessons", params={"updatedSince": "2099-01-01T00:00:00+02:00"})
    assert future.status_code == 200 and future.json() == []


def test_per_user_per_lesson_active_lessons(sim, client) -> None:
    truth = list(sim.ground_truth("active_lessons"))
    user, lesson = truth[7]["_userId"], truth[7]["_lessonId"]
    by_user = flatten(all_pages(client, f"/v1/users/{enc(user)}/active-lessons", page_size=3))
    assert sorted(r["_lessonId"] for r in by_user) == sorted(r["_lessonId"] for r in truth if r["_userId"] == user)
    by_lesson = flatten(all_pages(client, f"/v1/lessons/{enc(lesson)}/active-lessons", page_size=5))
    assert sorted(r["_userId"] for r in by_lesson) == sorted(r["_userId"] for r in truth if r["_lessonId"] == lesson)
    both = client.get(f"/v1/users/{enc(user)}/lessons/{enc(lesson)}/active-lessons").json()
    assert both == [r for r in truth if (r["_userId"], r["_lessonId"]) == (user, lesson)]
    assert client.get("/v1/users/nobody/active-lessons").json() == []


def test_answers_of_every_lesson_equal_the_ground_truth_and_keys_are_unique(sim, client) -> None:
    truth = list(sim.ground_truth("answers"))
    keys = Counter(_answer_key(a) for a in truth)
    assert len(keys) == len(truth)  # (_activeLessonId, quizType, attemptIndex, _questionId) is a key
    served = []
    for lesson in sim.world.catalog.lesson_ids:
        covered = len(flatten(all_pages(client, f"/v1/lessons/{enc(lesson)}/active-lessons", page_size=1000)))
        pages = all_pages(client, f"/v1/lessons/{enc(lesson)}/answers", BOTH, page_size=7, pages=covered // 7 + 2)
        assert pages[-1] == []  # one page past the active lessons: empty
        served += flatten(pages)
    assert sorted(served, key=_answer_key) == sorted(truth, key=_answer_key)
    kinds = Counter((a["quizType"], a["attemptIndex"] > 0) for a in truth)
    assert kinds[("entry", False)] and kinds[("exit", False)] and kinds[("exit", True)]  # archived attempts exist
    result_types = {r["type"] for a in truth for r in a["results"]}
    assert result_types == {"text", "image-base-64", "number", "choice-ref"}
    assert any("position" in r for a in truth for r in a["results"]) and any("validation" in a for a in truth)


def test_empty_answer_pages_occur_mid_stream(sim, client) -> None:
    """An empty page is followed by non-empty ones: a client stopping on an empty page loses answers."""
    size = 5
    followed_by_rows = 0
    for lesson in sim.world.catalog.lesson_ids:
        n = len(client.get(f"/v1/lessons/{enc(lesson)}/active-lessons", params={"pageSize": "1000"}).json())
        rows = [
            len(p)
            for p in all_pages(client, f"/v1/lessons/{enc(lesson)}/answers", BOTH, page_size=size, pages=-(-n // size))
        ]
        followed_by_rows += sum(1 for k, count in enumerate(rows) if count == 0 and any(rows[k + 1 :]))
        assert any(count > size for count in rows) or sum(rows) == 0  # pages flatten to more rows than pageSize
    assert followed_by_rows > 0
    pages = all_pages(client, "/v1/active-lessons", page_size=20)
    by_key = {(r["_userId"], r["_lessonId"]) for r in flatten(pages)}
    unanswered = by_key - {(a["_userId"], a["_lessonId"]) for a in sim.ground_truth("answers")}
    assert len(unanswered) > len(by_key) // 4  # many started-but-unanswered lessons


def test_answer_filters(sim, client) -> None:
    truth = list(sim.ground_truth("answers"))
    user = next(a["_userId"] for a in truth if a["attemptIndex"] > 0)
    mine = [a for a in truth if a["_userId"] == user]
    current = {}
    for a in mine:
        if a["quizType"] == "exit":
            current[a["_activeLessonId"]] = max(current.get(a["_activeLessonId"], 0), a["attemptIndex"])

    def fetch(**flags: str) -> list:  # type: ignore[type-arg]
        return flatten(all_pages(client, f"/v1/users/{enc(user)}/answers", flags, page_size=1000))

    assert sorted(map(_answer_key, fetch(**BOTH))) == sorted(map(_answer_key, mine))
    exit_current = [a for a in mine if a["quizType"] == "exit" and a["attemptIndex"] == current[a["_activeLessonId"]]]
    assert sorted(map(_answer_key, fetch())) == sorted(map(_answer_key, exit_current))  # defaults: false, false
    assert sorted(map(_answer_key, fetch(includeArchived="true"))) == sorted(
        _answer_key(a) for a in mine if a["quizType"] == "exit"
    )
    pivot = sorted(a["lastDate"] for a in mine)[len(mine) // 2]
    recent = fetch(updatedSince=pivot, **BOTH)
    assert sorted(map(_answer_key, recent)) == sorted(_answer_key(a) for a in mine if a["lastDate"] >= pivot)
    lesson = mine[0]["_lessonId"]
    pair = client.get(f"/v1/users/{enc(user)}/lessons/{enc(lesson)}/answers", params=BOTH).json()
    assert sorted(map(_answer_key, pair)) == sorted(_answer_key(a) for a in mine if a["_lessonId"] == lesson)


def test_lessons_listing_carries_question_ids_that_answers_reference(sim, client) -> None:
    lessons = flatten(all_pages(client, "/v1/lessons", page_size=5))
    assert lessons == list(sim.ground_truth("lessons"))
    question_ids = {
        q["id"]
        for lesson in lessons
        for notion in lesson["notions"]
        for quiz in ("entryQuizz", "exitQuizz")
        if quiz in notion
        for q in notion[quiz]["questions"]
    }
    assert {a["_questionId"] for a in sim.ground_truth("answers")} <= question_ids
