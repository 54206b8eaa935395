"""Groups, users and group members: one snapshot of the `groups` stream (pulled whole every run)."""

from pipeline.defs.snapshots import Snapshot, snapshot_asset

GROUPS = Snapshot(
    "groups",
    ("groups", "users", "group_members"),
    "directory",
    "Who the learners are and which groups they belong to (disabled groups and users included).",
)

sync_groups = snapshot_asset(GROUPS)
