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


def test_a_setting_given_to_the_other_side_reaches_its_runs_only(capsys: pytest.CaptureFixture[str]) -> None:
    """`--other-env` compares two settings on one checkout: an invalid page size given to the other side fails
    that side's run, named, before this side's runs at the defaults."""
    with pytest.raises(SystemExit, match=r"full sync failed:[\s\S]*LESSONSYNC_PAGE_SIZE"):
        ab_bench.main(["--other-env", "LESSONSYNC_PAGE_SIZE=many", "--scale", "tiny", "--kind", "full", "--pairs", "1"])
    with pytest.raises(SystemExit) as refused:
        ab_bench.main(["--other-env", "LESSONSYNC_PAGE_SIZE", "--kind", "full"])
    assert refused.value.code == 2 and "NAME=VALUE" in capsys.readouterr().err
