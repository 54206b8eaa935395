"""Links the raw-table checks verify for the progress tables (pipeline/defs/raw_checks.py runs them)."""

from pipeline.contract.tables import ANSWER_KEY
from pipeline.defs.raw_checks import Link

LINKS = (
    Link("answers", "active_lessons", {"user_id": "user_id", "lesson_id": "lesson_id"}),
    Link("answer_results", "answers", {k: k for k in ANSWER_KEY}),
)
