"""The side-by-side benchmark harness (bench/compare_bench.py) end to end at scale tiny, one round, full
syncs only: its exactness checks are real (LessonSync equals the ground truth; dlt's result is checked and
its counts reported; a planted difference is caught). Never timed."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from bench import compare_bench
from bench.common import free_port
from bench.exactness import Checker
from simulator.server import start_simulator

TINY = {"active_lessons": 300, "answers": 2330}


@pytest.mark.slow
def test_harness_checks_every_side_against_the_ground_truth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compare_bench, "RESULTS", tmp_path / "results")
    work = tmp_path / "work"
    result = compare_bench.compare("tiny", 1, tmp_path, dlt_configs=("default",), incremental=False, keep_work=work)
    runs = result["median"]

    mine = runs["lessonsync_full"]
    assert "error" not in mine, mine
    assert mine["exactness"]["equal"], mine["exactness"]
    tables = mine["exactness"]["tables"]
    assert tables["active_lessons"]["rows"] == tables["active_lessons"]["expected_rows"] == TINY["active_lessons"]
    assert tables["answers"]["rows"] == TINY["answers"]
    assert tables["answer_results"]["rows"] == tables["answer_results"]["expected_rows"] > TINY["answers"] / 2
    assert tables["answers"]["checksum"] == tables["answers"]["expected_checksum"]

    ceiling = runs["ceiling"]
    assert "error" not in ceiling, ceiling
    # later rounds start their own simulator on another port and replay these: path and query only
    recorded = (work / "lessonsync.urls").read_text().splitlines()
    assert recorded and all(line.split("\t", 1)[1].startswith("/v1/") for line in recorded), recorded[:3]
    assert ceiling["stream_requests"]["answers"] > 0 and ceiling["stream_requests"]["active_lessons"] > 0

    theirs = runs["dlt_default_full"]
    assert "error" not in theirs, theirs
    check = theirs["exactness"]
    for table in ("active_lessons", "answers", "answer_results"):  # checked and counted, whatever the verdict
        counts = check["tables"][table]
        assert counts["expected_rows"] == tables[table]["expected_rows"]
        assert counts["rows"] + counts["missing"] - counts["unexpected"] == counts["expected_rows"]
    print({t: (c["rows"], c["expected_rows"], c["equal"]) for t, c in check["tables"].items()})
    assert (tmp_path / "results" / "compare_tiny.json").exists()

    # The check is not vacuous: one answer gone and one active lesson changed are both caught.
    planted = tmp_path / "planted.duckdb"
    shutil.copy(work / "round0" / "lessonsync" / "warehouse.duckdb", planted)
    with duckdb.connect(str(planted)) as conn:
        conn.execute("DELETE FROM lms.answers WHERE rowid = (SELECT min(rowid) FROM lms.answers)")
        conn.execute(
            "UPDATE lms.active_lessons SET score = coalesce(score, 0) + 1 "
            "WHERE rowid = (SELECT min(rowid) FROM lms.active_lessons)"
        )
    with start_simulator(
        scale="tiny", seed=42, port=free_port()
    ) as sim:  # the same platform state: seed 42, nothing advanced
        checker = Checker.build(tmp_path, sim.base_url, "planted")
        verdict = checker.check(planted, "lessonsync")
        checker.close()
    assert not verdict["equal"]
    assert verdict["tables"]["answers"]["missing"] == 1
    assert verdict["tables"]["answers"]["rows"] == TINY["answers"] - 1
    assert verdict["tables"]["active_lessons"]["different"] == 1
    assert verdict["tables"]["active_lessons"]["checksum"] != verdict["tables"]["active_lessons"]["expected_checksum"]
