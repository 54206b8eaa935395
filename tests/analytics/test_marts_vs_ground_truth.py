"""Every model builds on data synced from the tiny simulator, and each mart's figures equal an independent
pandas computation from the simulator's ground truth (ground_truth_marts.py).

Uses the suite-wide fixture `synced_tiny` (tests/conftest.py: a stack two simulated days old and a warehouse
synced from it exactly). That warehouse is shared and read-only, so the models are built (with `as_of` =
the simulator's clock) and published in a copy of it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
import ground_truth_marts as gt
import pandas as pd
import pytest

from pipeline.analytics.build import build_models
from pipeline.analytics.models import load_project
from pipeline.analytics.publish import publish

pytestmark = pytest.mark.slow  # needs the suite's tiny sync (shared, ~40 s once per session)


class Synced:
    """The synced data directory, its published snapshot, and the simulator's ground truth (read once)."""

    def __init__(self, data_dir: Path, sim: Any) -> None:
        self.data_dir = Path(data_dir)
        self.sim = sim
        self.truth = cache(lambda resource: list(sim.ground_truth(resource)))
        self.snapshot = duckdb.connect(str(self.data_dir / "analytics.duckdb"), read_only=True)
        self.as_of: datetime = self.snapshot.execute("SELECT max(as_of) FROM _builds").fetchall()[0][0]

    def mart(self, name: str, index: list[str]) -> pd.DataFrame:
        table = self.snapshot.sql(f"SELECT * FROM {name}").to_arrow_table()
        return table.to_pandas(date_as_object=True).set_index(index).sort_index()


@pytest.fixture(scope="module")
def synced(synced_tiny: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synced]:
    data_dir = tmp_path_factory.mktemp("analytics_on_tiny")
    shutil.copy2(synced_tiny.warehouse_path, data_dir / "warehouse.duckdb")
    project = load_project()
    conn = duckdb.connect(str(data_dir / "warehouse.duckdb"))
    try:
        results = list(build_models(conn, project, as_of=synced_tiny.sim.now()))
        failures = [r.error for r in results if r.status != "built"]
        failures += [o.summary() for r in results for o in r.outcomes if not o.passed]
        assert failures == [], "every model builds and passes its tests on simulator data"
        publish(conn, project, data_dir)
    finally:
        conn.close()
    state = Synced(data_dir, synced_tiny.sim)
    yield state
    state.snapshot.close()


def same(warehouse: pd.DataFrame, expected: pd.DataFrame) -> None:
    """Equal figures on equal keys (floats to 1e-9; None and NaN alike)."""
    got = warehouse[list(expected.columns)]
    assert sorted(got.index) == sorted(expected.index), "different rows"
    pd.testing.assert_frame_equal(
        got.astype("object").where(got.notna(), None).sort_index(),
        expected.astype("object").where(expected.notna(), None).loc[got.sort_index().index],
        check_dtype=False,
        check_exact=False,
        rtol=1e-9,
        check_names=False,
    )


def test_every_model_was_built_and_published(synced: Synced) -> None:
    tables = {
        r[0]
        for r in synced.snapshot.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchall()
    }
    published = [m.name for m in load_project().published]
    assert set(published) <= tables
    empty = [name for name in published if synced.snapshot.execute(f"SELECT count(*) FROM {name}").fetchall() == [(0,)]]
    assert empty == [], "every model has rows on simulator data"
    for mart in load_project().marts:
        assert (synced.data_dir / "marts" / f"{mart.name}.parquet").exists()


def test_learner_progress_matches_ground_truth(synced: Synced) -> None:
    progress, answers = gt.progress_frame(synced.truth), gt.answers_frame(synced.truth)
    same(synced.mart("learner_progress", ["user_id", "lesson_id"]), gt.learner_progress(progress, answers))


def test_lesson_funnel_matches_ground_truth(synced: Synced) -> None:
    expected = gt.lesson_funnel(gt.progress_frame(synced.truth), synced.truth)
    same(synced.mart("lesson_funnel", ["lesson_id"]), expected)
    assert expected["succeeded"].sum() > 0 and expected["failed"].sum() > 0 and expected["not_started"].sum() > 0


def test_question_difficulty_matches_ground_truth(synced: Synced) -> None:
    expected = gt.question_difficulty(gt.answers_frame(synced.truth), synced.truth)
    same(synced.mart("question_difficulty", ["lesson_id", "quiz_type", "question_id"]), expected)
    assert expected["first_attempts_decided"].lt(expected["first_attempts"]).any()  # pending reviews occur


def test_group_completion_matches_ground_truth(synced: Synced) -> None:
    expected = gt.group_completion(gt.progress_frame(synced.truth), synced.truth)
    same(synced.mart("group_completion", ["group_id", "lesson_id"]), expected)


def test_session_attendance_matches_ground_truth(synced: Synced) -> None:
    same(synced.mart("session_attendance", ["session_id"]), gt.session_attendance(synced.truth))


def test_certificates_by_badge_match_ground_truth(synced: Synced) -> None:
    expected = gt.certificates_by_badge(synced.truth, synced.as_of)
    assert expected["certificates"].sum() > 0, "the tiny simulator delivered certificates"
    same(synced.mart("certificates_by_badge", ["badge_id"]), expected)


def test_daily_activity_matches_ground_truth(synced: Synced) -> None:
    progress, answers = gt.progress_frame(synced.truth), gt.answers_frame(synced.truth)
    warehouse = synced.mart("daily_activity", ["activity_date"])
    expected = gt.daily_activity(progress, answers, synced.truth)
    same(warehouse, expected)
    assert expected["certificates_completed"].sum() > 0 and expected["lessons_started"].sum() > 0
