"""bench/rss_timeline.py: a process samples itself and marks calls; the summary names what was open at the
sampled peak and each step's peak. Never timed."""

from __future__ import annotations

import json
from pathlib import Path

from bench.rss_timeline import SAMPLE_FIELDS, Timeline, _marked, summarize


def test_the_peak_is_attributed_to_the_step_and_call_open_at_it() -> None:
    def sample(t: float, tree: float) -> list[float]:
        return [t, tree, tree, *([0.0] * (len(SAMPLE_FIELDS) - 2))]

    timeline = {
        "samples": [sample(0, 100), sample(1, 300), sample(2, 700), sample(3, 200), sample(4, 250)],
        "marks": [
            [0.5, "step a >", None],
            [0.6, "Load.commit >", 1],
            [2.5, "Load.commit <", 1],
            [2.6, "step a <", None],
            [3.5, "step b >", None],
            [4.5, "step b <", None],
        ],
    }
    summary = summarize(timeline)
    assert summary["sampled_peak"]["tree"] == 700 and summary["sampled_peak"]["t_s"] == 2
    assert summary["open_at_peak"] == ["step a", "Load.commit"]
    assert summary["steps"]["a"]["peak_tree_mib"] == 700
    assert summary["steps"]["b"]["peak_tree_mib"] == 250


def test_a_process_samples_its_own_memory_and_marks_calls(tmp_path: Path) -> None:
    timeline = Timeline(tmp_path / "t.json")
    timeline.start()
    marked = _marked("work", lambda n: b"x" * n, timeline)  # written: resident
    held = marked(64 << 20)
    timeline.close([])
    written = json.loads((tmp_path / "t.json").read_text())
    assert [m[1] for m in written["marks"]] == ["work >", "work <"]
    last = dict(zip(SAMPLE_FIELDS, written["samples"][-1][1:], strict=False))
    assert last["rss"] >= written["samples"][0][1] + 60 and last["tree"] >= last["rss"] and last["file"] > 0
    assert len(held) == 64 << 20


def test_the_tree_is_every_descendant_and_nothing_else() -> None:
    """A grandchild counts (a decode worker's own child would); the process asked about and its parent do not."""
    import subprocess
    import sys

    import psutil

    from bench.rss_timeline import descendants

    script = "import subprocess, time; c = subprocess.Popen(['sleep', '30']); print(c.pid, flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    grandchild = 0
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        assert {child.pid, grandchild} <= set(descendants())
        assert set(descendants()) == {p.pid for p in psutil.Process().children(recursive=True)}
        assert descendants(child.pid) == [grandchild]
    finally:
        if grandchild:
            psutil.Process(grandchild).kill()
        child.kill()
        child.wait()
