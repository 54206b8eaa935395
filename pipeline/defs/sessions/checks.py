"""Links the raw-table checks verify for the sessions' tables (pipeline/defs/raw_checks.py runs them)."""

from pipeline.defs.raw_checks import Link

LINKS = (Link("lesson_session_registrations", "lesson_sessions", {"session_id": "id"}),)
