"""bench/ab_bench.py: interleaved syncs of two checkouts, each a fresh process on a copy of one warehouse."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import ab_bench

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_pairs_of_syncs_from_two_checkouts_are_timed(capsys: pytest.CaptureFixture[str]) -> None:
    assert ab_bench.main(["--other", str(REPO), "--scale", "tiny", "--kind", "one_percent", "--pairs", "1"]) == 0
    captured = capsys.readouterr()
    assert "making a tiny warehouse" in captured.err and "pair 1: other" in captured.err
    summary = re.search(
        r"one_percent at scale tiny, 1 interleaved pairs: other .* median ([\d.]+) s .*; "
        r"this checkout median ([\d.]+) s",
        captured.out,
    )
    assert summary is not None, captured.out
    assert all(float(seconds) > 0 for seconds in summary.groups())
