"""Is a DuckDB result equal to the platform? Row counts and an order-independent checksum per table
(active lessons, answers, answer results), for LessonSync's warehouse and for dlt's dataset alike,
against the simulator's ground truth (`GET /_sim/ground-truth/{resource}`, NDJSON in API field names).

Every row of every side becomes one canonical string of all its data fields (numbers as DOUBLE text,
date-times as epoch milliseconds, booleans as text, NULL as a marker), hashed (64 bits of md5); a table's
checksum is the sum of its row hashes (order-independent, sensitive to duplicates). Keys are hashed too,
so a difference is told apart as rows missing, rows unexpected, or rows present with other content.
Everything runs in DuckDB (one in-memory connection, the sides attached read-only): seconds at scale
medium, never part of a measured time.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import duckdb
import httpx

from bench.common import ChildRun, run_measured

TABLES = ("active_lessons", "answers", "answer_results")
NULL = "'\u2205'"

# (kind, LessonSync column, dlt column, ground-truth expression over the NDJSON columns)
FIELDS: dict[str, list[tuple[str, str, str, str]]] = {
    "active_lessons": [
        ("text", "owner_id", "_owner_id", '"_ownerId"'),
        ("text", "user_id", "_user_id", '"_userId"'),
        ("text", "lesson_id", "_lesson_id", '"_lessonId"'),
        ("num", "version", "version", "version"),
        ("num", "success_rate", "success_rate", '"successRate"'),
        ("num", "score", "score", "score"),
        ("num", "time_spent", "time_spent", '"timeSpent"'),
        ("bool", "achieved", "achieved", "achieved"),
        ("ts", "last_date", "last_date", '"lastDate"'),
        ("ts", "start_date", "start_date", '"startDate"'),
        ("text", "title", "title", "title"),
        ("num", "stats_progress_in_percent", "stats__progress_in_percent", "stats->>'$.progressInPercent'"),
        ("num", "stats_nb_incorrect_answers", "stats__nb_incorrect_answers", "stats->>'$.nbIncorrectAnswers'"),
        ("num", "stats_nb_correct_answers", "stats__nb_correct_answers", "stats->>'$.nbCorrectAnswers'"),
        ("bool", "stats_success", "stats__success", "stats->>'$.success'"),
        ("num", "stats_validation_threshold", "stats__validation_threshold", "stats->>'$.validationThreshold'"),
    ],
    "answers": [
        ("text", "active_lesson_id", "_active_lesson_id", '"_activeLessonId"'),
        ("text", "quiz_type", "quiz_type", '"quizType"'),
        ("num", "attempt_index", "attempt_index", '"attemptIndex"'),
        ("text", "question_id", "_question_id", '"_questionId"'),
        ("text", "lesson_id", "_lesson_id", '"_lessonId"'),
        ("text", "user_id", "_user_id", '"_userId"'),
        ("text", "question_title", "question_title", '"questionTitle"'),
        ("num", "lesson_version", "lesson_version", '"lessonVersion"'),
        ("ts", "last_date", "last_date", '"lastDate"'),
        ("num", "start_time_stamp", "start_time_stamp", '"startTimeStamp"'),
        ("num", "end_time_stamp", "end_time_stamp", '"endTimeStamp"'),
        ("bool", "is_valid", "is_valid", '"isValid"'),
        ("text", "validation_feedback_status", "validation__feedback__status", "validation->>'$.feedback.status'"),
        ("text", "validation_feedback_title", "validation__feedback__title", "validation->>'$.feedback.title'"),
        (
            "text",
            "validation_forced_validation_type",
            "validation__forced_validation_type",
            "validation->>'$.forcedValidationType'",
        ),
        ("bool", "validation_is_forced_valid", "validation__is_forced_valid", "validation->>'$.isForcedValid'"),
    ],
    "answer_results": [
        ("text", "active_lesson_id", "a._active_lesson_id", '"_activeLessonId"'),
        ("text", "quiz_type", "a.quiz_type", '"quizType"'),
        ("num", "attempt_index", "a.attempt_index", '"attemptIndex"'),
        ("text", "question_id", "a._question_id", '"_questionId"'),
        ("num", "result_index", "r._dlt_list_idx", "result_index"),
        ("text", "type", "r.type", "result->>'$.type'"),
        ("text", "label_name", "r.label_name", "result->>'$.labelName'"),
        ("value", "coalesce(value_text, CAST(value_number AS VARCHAR))", "r.value", "result->>'$.value'"),
        ("num", "position_left", "r.position__left", "result->>'$.position.left'"),
        ("num", "position_top", "r.position__top", "result->>'$.position.top'"),
    ],
}
KEY_WIDTH = {"active_lessons": 3, "answers": 4, "answer_results": 5}  # the first fields are the natural key

TRUTH_COLUMNS = {
    "active_lessons": {
        "stats": "JSON",
        "version": "VARCHAR",
        "successRate": "VARCHAR",
        "score": "VARCHAR",
        "_ownerId": "VARCHAR",
        "_userId": "VARCHAR",
        "_lessonId": "VARCHAR",
        "timeSpent": "VARCHAR",
        "achieved": "VARCHAR",
        "lastDate": "VARCHAR",
        "startDate": "VARCHAR",
        "title": "VARCHAR",
    },
    "answers": {
        "results": "JSON",
        "attemptIndex": "VARCHAR",
        "quizType": "VARCHAR",
        "_activeLessonId": "VARCHAR",
        "_lessonId": "VARCHAR",
        "_userId": "VARCHAR",
        "_questionId": "VARCHAR",
        "questionTitle": "VARCHAR",
        "lessonVersion": "VARCHAR",
        "lastDate": "VARCHAR",
        "startTimeStamp": "VARCHAR",
        "endTimeStamp": "VARCHAR",
        "isValid": "VARCHAR",
        "validation": "JSON",
    },
}


def _canon(kind: str, expr: str) -> str:
    text = f"CAST({expr} AS VARCHAR)"
    if kind == "num":
        text = f"CAST(CAST({text} AS DOUBLE) AS VARCHAR)"
    elif kind == "ts":
        text = f"CAST(epoch_ms(CAST({text} AS TIMESTAMPTZ)) AS VARCHAR)"
    elif kind == "bool":
        text = f"CAST(CAST({text} AS BOOLEAN) AS VARCHAR)"
    elif kind == "value":  # a number or a string: numbers compare as DOUBLE text whichever way they were stored
        text = f"coalesce(CAST(TRY_CAST({text} AS DOUBLE) AS VARCHAR), {text})"
    return f"coalesce({text}, {NULL})"


def _hashes(table: str, exprs: list[str]) -> str:
    fields = [_canon(kind, e) for (kind, *_), e in zip(FIELDS[table], exprs, strict=True)]
    width = KEY_WIDTH[table]
    # md5, not DuckDB's hash(): hash() collides on similar short strings (87 key collisions among the
    # 193,802 answers of scale small); 64 bits of md5 are as good as random here.
    return (
        f"CAST(md5_number(concat_ws(chr(31), {', '.join(fields[:width])})) >> 64 AS UBIGINT) AS k, "
        f"CAST(md5_number(concat_ws(chr(31), {', '.join(fields)})) >> 64 AS UBIGINT) AS h"
    )


@dataclass
class TableCheck:
    table: str
    expected_rows: int
    rows: int
    distinct_keys: int
    missing: int  # keys of the platform absent from the result
    unexpected: int  # keys in the result the platform does not have
    different: int  # keys present on both sides with other content
    checksum: str
    expected_checksum: str

    @property
    def equal(self) -> bool:
        return (
            self.rows == self.expected_rows == self.distinct_keys
            and not (self.missing or self.unexpected or self.different)
            and self.checksum == self.expected_checksum
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "equal": self.equal}


class Checker:
    """The ground truth of one platform state, hashed into a DuckDB file (`build`), and checks of results
    against it. The benchmarks call it through its CLI in a child process, so their own process stays small
    (a child's peak RSS from os.wait4 starts at its parent's size at fork)."""

    def __init__(self, truth_db: Path) -> None:
        self.conn = duckdb.connect(str(truth_db))
        self.conn.execute("SET TimeZone = 'UTC'")
        self.conn.execute(f"SET temp_directory = '{truth_db.parent / 'exactness_tmp'}'")
        self.label = truth_db.stem.removeprefix("truth_")
        self.counts = {t: self.conn.execute(f"SELECT count(*) FROM truth_{t}").fetchone()[0] for t in TABLES}

    @classmethod
    def build(cls, work_dir: Path, base_url: str, label: str) -> Checker:
        truth_db = work_dir / f"truth_{label}.duckdb"
        truth_db.unlink(missing_ok=True)
        conn = duckdb.connect(str(truth_db))
        conn.execute("SET TimeZone = 'UTC'")
        conn.execute(f"SET temp_directory = '{work_dir / 'exactness_tmp'}'")
        files = {}
        for resource in ("active_lessons", "answers"):
            path = work_dir / f"truth_{label}_{resource}.ndjson"
            with httpx.stream("GET", f"{base_url}/_sim/ground-truth/{resource}", timeout=3600) as response:
                response.raise_for_status()
                with path.open("wb") as out:
                    for chunk in response.iter_bytes(1 << 20):
                        out.write(chunk)
            files[resource] = path
        for resource, path in files.items():
            columns = ", ".join(f"'{name}': '{kind}'" for name, kind in TRUTH_COLUMNS[resource].items())
            conn.execute(
                f"CREATE TEMP VIEW raw_{resource} AS SELECT * FROM read_json('{path}', "
                f"format='newline_delimited', columns={{{columns}}}, maximum_object_size=1000000000)"
            )
        conn.execute(
            "CREATE TEMP VIEW raw_answer_results AS SELECT *, i - 1 AS result_index, "
            "CAST(results AS JSON[])[i] AS result FROM raw_answers, "
            "range(1, CAST(json_array_length(results) AS BIGINT) + 1) AS t(i)"
        )
        for table in TABLES:
            exprs = [f[3] for f in FIELDS[table]]
            conn.execute(f"CREATE TABLE truth_{table} AS SELECT {_hashes(table, exprs)} FROM raw_{table}")
        conn.close()
        for path in files.values():
            path.unlink()
        return cls(truth_db)

    def check(self, database: Path, flavour: str) -> dict[str, Any]:
        """`flavour` is 'lessonsync' (schema lms, LessonSync's tables) or 'dlt' (dataset lms)."""
        self.conn.execute(f"ATTACH '{database}' AS side (READ_ONLY)")
        try:
            checks = {table: self._check_table(table, flavour).as_dict() for table in TABLES}
        finally:
            self.conn.execute("DETACH side")
        return {"state": self.label, "equal": all(c["equal"] for c in checks.values()), "tables": checks}

    def _columns(self, table: str) -> set[str]:
        rows = self.conn.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = 'side' "
            "AND schema_name = 'lms' AND table_name = ?",
            [table],
        ).fetchall()
        return {r[0] for r in rows}

    def _dlt_expr(self, column: str, present: dict[str, set[str]]) -> str:
        """A dlt column, with the variant columns dlt adds when a field changes type (`x__v_double`...);
        NULL when dlt never saw a value for it."""
        alias, name = column.split(".", 1) if "." in column else ("", column)
        table = {"a": "answers", "r": "answers__results"}.get(alias, "")
        columns = present[table] if alias else present["_root"]
        prefix = f"{alias}." if alias else ""
        parts = [f'CAST({prefix}"{c}" AS VARCHAR)' for c in sorted(columns) if c == name or c.startswith(name + "__v_")]
        return f"coalesce({', '.join(parts)})" if parts else "NULL"

    def _side_query(self, table: str, flavour: str) -> str:
        if flavour == "lessonsync":
            exprs = [f[1] for f in FIELDS[table]]
            live = " WHERE deleted_at IS NULL" if "deleted_at" in self._columns(table) else ""
            return f"SELECT {_hashes(table, exprs)} FROM side.lms.{table}{live}"
        if table == "answer_results":
            present = {"answers": self._columns("answers"), "answers__results": self._columns("answers__results")}
            exprs = [self._dlt_expr(f[2], present) for f in FIELDS[table]]
            return (
                f"SELECT {_hashes(table, exprs)} FROM side.lms.answers__results r "
                "JOIN side.lms.answers a ON r._dlt_parent_id = a._dlt_id"
            )
        present = {"_root": self._columns(table)}
        exprs = [self._dlt_expr(f[2], present) for f in FIELDS[table]]
        return f"SELECT {_hashes(table, exprs)} FROM side.lms.{table}"

    def _check_table(self, table: str, flavour: str) -> TableCheck:
        have = self._columns(table if flavour == "lessonsync" or table != "answer_results" else "answers__results")
        if not have:
            source = "SELECT NULL::UBIGINT AS k, NULL::UBIGINT AS h WHERE false"
        else:
            source = self._side_query(table, flavour)
        self.conn.execute(f"CREATE OR REPLACE TEMP TABLE got AS {source}")
        truth = f"truth_{table}"
        row = self.conn.execute(f"""
            SELECT (SELECT count(*) FROM {truth}), (SELECT count(*) FROM got), (SELECT count(DISTINCT k) FROM got),
                   (SELECT count(*) FROM {truth} t WHERE NOT EXISTS (SELECT 1 FROM got g WHERE g.k = t.k)),
                   (SELECT count(DISTINCT k) FROM got g WHERE NOT EXISTS (SELECT 1 FROM {truth} t WHERE g.k = t.k)),
                   (SELECT count(DISTINCT t.k) FROM {truth} t JOIN got g ON g.k = t.k WHERE g.h <> t.h),
                   (SELECT CAST(coalesce(sum(CAST(h AS HUGEINT)), 0) AS VARCHAR) FROM got),
                   (SELECT CAST(coalesce(sum(CAST(h AS HUGEINT)), 0) AS VARCHAR) FROM {truth})
        """).fetchone()
        self.conn.execute("DROP TABLE got")
        return TableCheck(table, row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7])

    def close(self) -> None:
        self.conn.close()


class Truth:
    """The exactness checks (bench/exactness.py) in child processes, so this process stays small: a child's
    peak RSS from os.wait4 starts at its parent's size when it is forked."""

    def __init__(self, work: Path, base_url: str, label: str) -> None:
        child = _exactness_child("truth", base_url=base_url, work_dir=str(work), label=label)
        if child.returncode != 0:
            raise RuntimeError(f"ground truth {label}: {child.stderr_tail}")
        self.db = work / f"truth_{label}.duckdb"

    def check(self, database: Path, flavour: str) -> dict[str, Any]:
        child = _exactness_child("check", truth=str(self.db), database=str(database), flavour=flavour)
        if child.returncode != 0:
            raise RuntimeError(f"exactness check of {database.name}: {child.stderr_tail}")
        return json.loads(child.stdout)

    def close(self) -> None:
        self.db.unlink(missing_ok=True)


def _exactness_child(command: str, **options: str) -> ChildRun:
    """`python -m bench.exactness <command> --<option> <value>...` (main below) in a child process."""
    flags = [part for name, value in options.items() for part in (f"--{name.replace('_', '-')}", value)]
    return run_measured([sys.executable, "-m", "bench.exactness", command, *flags])


def main() -> int:
    """`python -m bench.exactness truth --base-url U --work-dir D --label L` builds D/truth_L.duckdb;
    `python -m bench.exactness check --truth D/truth_L.duckdb --database W --flavour lessonsync|dlt` prints the
    verdict as JSON."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("command", choices=("truth", "check"))
    parser.add_argument("--base-url")
    parser.add_argument("--work-dir", type=Path)
    parser.add_argument("--label")
    parser.add_argument("--truth", type=Path)
    parser.add_argument("--database", type=Path)
    parser.add_argument("--flavour", choices=("lessonsync", "dlt"))
    args = parser.parse_args()
    if args.command == "truth":
        checker = Checker.build(args.work_dir, args.base_url, args.label)
        print(json.dumps(checker.counts))
    else:
        checker = Checker(args.truth)
        print(json.dumps(checker.check(args.database, args.flavour)))
    checker.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
