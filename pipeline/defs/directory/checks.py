"""Links the raw-table checks verify for the directory's tables (pipeline/defs/raw_checks.py runs them)."""

from pipeline.defs.raw_checks import Link

LINKS = (
    Link("group_members", "groups", {"group_id": "id"}),
    Link("group_members", "users", {"user_id": "id"}),
)
