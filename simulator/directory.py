"""Users and groups. Users exist only as members of groups (there is no global users listing); a user
can be in several groups, groups can be disabled, and some users are deactivated (hidden from a group's
listing unless includeDisabled=true)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from simulator import names
from simulator.rng import object_id, pyrandom

KIND_USER, KIND_GROUP = 6, 7
GROUP_TYPES = ("standard", "standard", "dynamic", "manager")


@dataclass
class Directory:
    seed: int
    users: list[dict[str, Any]] = field(default_factory=list)  # API User records, by user number
    user_disabled: list[bool] = field(default_factory=list)
    groups: list[dict[str, Any]] = field(default_factory=list)  # API UserGroup records without counts
    members: list[list[int]] = field(default_factory=list)  # per group: user numbers, join order
    _member_sets: list[set[int]] = field(default_factory=list)
    _user_index: dict[str, int] = field(default_factory=dict)
    _group_index: dict[str, int] = field(default_factory=dict)
    _group_by_name: dict[str, int] = field(default_factory=dict)

    # --- lookups ---------------------------------------------------------------------------------

    def user_number(self, user_id: str) -> int | None:
        return self._user_index.get(user_id)

    def group_number(self, group_id: str) -> int | None:
        return self._group_index.get(group_id)

    def group_by_unique_name(self, unique_name: str) -> int | None:
        return self._group_by_name.get(unique_name)

    def group_record(self, g: int) -> dict[str, Any]:
        """The UserGroup as served: counts computed from the current membership."""
        members = self.members[g]
        active = sum(1 for u in members if not self.user_disabled[u])
        return {**self.groups[g], "nbUser": len(members), "nbActiveUser": active}

    def visible_members(self, g: int, include_disabled: bool, search: str | None) -> list[int]:
        needle = search.casefold() if search else None
        out = []
        for u in self.members[g]:
            if not include_disabled and self.user_disabled[u]:
                continue
            if needle is not None and not _user_matches(self.users[u], needle):
                continue
            out.append(u)
        return out

    def visible_groups(self, include_disabled: bool, search: str | None) -> list[int]:
        needle = search.casefold() if search else None
        return [
            g
            for g, group in enumerate(self.groups)
            if (include_disabled or not group.get("disabled"))
            and (
                needle is None
                or needle in group["title"].casefold()
                or needle in group.get("uniqueName", "").casefold()
            )
        ]

    # --- changes ---------------------------------------------------------------------------------

    def add_user(self, rng: random.Random, user_id: str | None = None) -> int:
        n = len(self.users)
        first, last = rng.choice(names.FIRST_NAMES), rng.choice(names.LAST_NAMES)
        login = f"{first}.{last}.{n}".lower().replace(" ", "-").replace("'", "")
        uid = user_id or object_id(self.seed, KIND_USER, n)
        self.users.append(
            {
                "locale": rng.choice(names.LOCALES),
                "points": rng.randrange(0, 5000),
                "login": login,
                "email": f"{login}@example.com",
                "firstname": first,
                "lastname": last,
                "alias": f"{first} {last[0]}.",
                "id": uid,
            }
        )
        self.user_disabled.append(bool(rng.random() < 0.05))
        self._user_index[uid] = n
        return n

    def add_group(
        self, rng: random.Random, group_id: str | None = None, unique_name: str | None = None, title: str | None = None
    ) -> int:
        g = len(self.groups)
        word = names.GROUP_WORDS[g % len(names.GROUP_WORDS)]
        city = names.CITIES[(g // len(names.GROUP_WORDS)) % len(names.CITIES)]
        gid = group_id or object_id(self.seed, KIND_GROUP, g)
        record: dict[str, Any] = {
            "title": title or f"{word} — {city} {g + 1}",
            "id": gid,
            "uniqueName": unique_name or f"{word.lower()}-{city.lower()}-{g + 1}",
            "type": rng.choice(GROUP_TYPES),
            "disabled": False,
        }
        if rng.random() < 0.6:
            record["description"] = f"Équipe {word} de {city}"
        self.groups.append(record)
        self.members.append([])
        self._member_sets.append(set())
        self._group_index[gid] = g
        self._group_by_name[record["uniqueName"]] = g
        return g

    def add_member(self, g: int, u: int) -> bool:
        if u in self._member_sets[g]:
            return False
        self.members[g].append(u)
        self._member_sets[g].add(u)
        return True

    def remove_member(self, g: int, u: int) -> None:
        self.members[g].remove(u)
        self._member_sets[g].discard(u)

    def rename_group(self, g: int, title: str) -> None:
        self.groups[g]["title"] = title

    def set_disabled(self, g: int, disabled: bool) -> None:
        self.groups[g]["disabled"] = disabled


def _user_matches(user: dict[str, Any], needle: str) -> bool:
    return any(needle in str(user[k]).casefold() for k in ("firstname", "lastname", "login", "email", "alias"))


def build_directory(seed: int, n_users: int, n_groups: int) -> Directory:
    rng = pyrandom(seed, 3)
    directory = Directory(seed)
    specials = [*names.SPECIAL_USER_IDS, names.DECOY_USER_ID]
    for n in range(n_users):
        directory.add_user(rng, specials[n - 1] if 1 <= n <= len(specials) else None)
    for g in range(n_groups):
        special = names.SPECIAL_GROUPS[g - 2] if 2 <= g < 2 + len(names.SPECIAL_GROUPS) else None
        directory.add_group(rng, *(special or ()))
    # every user in 1-3 groups; a few groups disabled (with members still in them)
    for u in range(n_users):
        for g in rng.sample(range(n_groups), min(n_groups, rng.randrange(1, 4))):
            directory.add_member(g, u)
    for u in range(1, 1 + len(specials)):  # the awkward users sit in the awkward groups too, visibly
        directory.add_member(2, u)
        directory.user_disabled[u] = False
    for g in range(n_groups):
        if g % 7 == 5:
            directory.set_disabled(g, True)
    return directory
