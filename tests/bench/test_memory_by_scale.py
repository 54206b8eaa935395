"""bench/memory_by_scale.py turns sync_bench results into its table: one row per run kind and scale, a peak above
the target in bold, a failed run named as failed."""

from __future__ import annotations

from bench.memory_by_scale import TARGET_MIB, markdown, peaks


def result(full: dict, **others: dict) -> dict:
    return {
        "date": "2026-11-26",
        "load_average_at_start": [0.5],
        "load_average_now": [0.7],
        "counts": {"answers": 1234},
        "selections": {"key_lms_all": {"full": full, **others}},
    }


def run(process: float, tree: float, pss: float) -> dict:
    return {"run_seconds": 1.5, "peak_rss_mib": process, "peak_tree_rss_mib": tree, "peak_tree_pss_mib": pss}


def test_a_peak_above_the_target_is_bold_and_a_failed_run_is_named():
    rows = peaks(
        "medium",
        result(
            run(500.0, TARGET_MIB + 25.0, 580.0),
            no_change=run(300.0, 300.0, 280.0),
            one_percent={"error": "boom\nsync failed"},
        ),
    )
    assert [(r["scale"], r["kind"]) for r in rows] == [
        ("medium", "full"),
        ("medium", "no_change"),
        ("medium", "one_percent"),
    ]
    table = markdown(rows).splitlines()
    assert table[2] == "| medium (1,234) | full | 1.5 | 500.0 | **625.0** | 580.0 | 2026-11-26 (0.5, 0.7) |"
    assert table[3] == "| medium (1,234) | no_change | 1.5 | 300.0 | 300.0 | 280.0 | 2026-11-26 (0.5, 0.7) |"
    assert "FAILED: sync failed" in table[4]
