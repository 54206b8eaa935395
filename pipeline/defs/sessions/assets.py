"""Lesson sessions and their registrations: one snapshot of the `lesson_sessions` stream."""

from pipeline.defs.snapshots import Snapshot, snapshot_asset

LESSON_SESSIONS = Snapshot(
    "lesson_sessions",
    ("lesson_sessions", "lesson_session_registrations"),
    "sessions",
    "Scheduled lesson sessions and who registered, attended or was turned away.",
)

sync_lesson_sessions = snapshot_asset(LESSON_SESSIONS)
