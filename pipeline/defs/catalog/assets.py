"""Categories and the lesson catalogue: two snapshots (each stream pulled whole every run)."""

from pipeline.defs.snapshots import Snapshot, snapshot_asset

CATEGORIES = Snapshot("categories", ("categories",), "catalog", "How the organisation files its lessons.")
LESSONS = Snapshot(
    "lessons",
    ("lessons", "lesson_questions"),
    "catalog",
    "The lesson catalogue with its notions and the questions of every quiz.",
)

sync_categories = snapshot_asset(CATEGORIES)
sync_lessons = snapshot_asset(LESSONS)
