"""A few mart results as small text tables, read from the published snapshot (what `make demo` prints)."""

from __future__ import annotations

from pathlib import Path

import duckdb

from pipeline.analytics.publish import SNAPSHOT_FILE
from pipeline.console import text_table
from pipeline.warehouse import scalar

# (title, query) over the snapshot's tables; each answers one analyst question in a few rows.
SUMMARY_QUERIES: tuple[tuple[str, str], ...] = (
    (
        "Lesson funnel: the five lessons with the most learners",
        "SELECT left(lesson_title, 36) AS lesson, learners, not_started, in_progress, succeeded, failed, "
        "round(100 * success_rate, 1) AS success_pct, round(median_hours_to_success, 1) AS median_h_to_success "
        "FROM lesson_funnel ORDER BY learners DESC, lesson LIMIT 5",
    ),
    (
        "Question difficulty: the five hardest exit-quiz questions (at least 5 first attempts decided)",
        "SELECT left(question_title, 48) AS question, first_attempts_decided AS decided, "
        "round(100 * first_attempt_correct_rate, 1) AS first_try_correct_pct FROM question_difficulty "
        "WHERE quiz_type = 'exit' AND first_attempts_decided >= 5 "
        "ORDER BY first_attempt_correct_rate, question LIMIT 5",
    ),
    (
        "Certificates per badge",
        "SELECT left(badge_name, 40) AS badge, certificates, active, expiring_within_30_days AS expiring_30d, "
        "expired, revoked FROM certificates_by_badge ORDER BY certificates DESC, badge LIMIT 5",
    ),
)


def mart_summary(data_dir: Path) -> str:
    """The summary tables as text; a clear line instead when nothing was published yet."""
    snapshot = Path(data_dir) / SNAPSHOT_FILE
    if not snapshot.exists():
        return f"(no analytics published yet: {snapshot} is missing; materialize analytics/published)"
    conn = duckdb.connect(str(snapshot), read_only=True)
    try:
        published = scalar(conn, "SELECT published_at FROM _published")
        parts = [f"Analytics published at {published:%Y-%m-%d %H:%M:%S %Z} ({snapshot})"]
        for title, query in SUMMARY_QUERIES:
            result = conn.sql(query)
            table = text_table(result.columns, result.fetchall())
            parts.append(f"\n{title}\n{table}")
        return "\n".join(parts)
    finally:
        conn.close()
