"""Page drift while several pages of the active-lessons listing are in flight at once (the pager keeps up to
LESSONSYNC_CONCURRENCY of them): still detected, swept again, exact (proof: pipeline/source/sweeps.py)."""

from urllib.parse import parse_qs, urlsplit

from conftest import client_settings, truth
from source_expect import assert_same_table, expected_tables, keyed

from pipeline.source.client import PlatformClient
from simulator import SimulatorConfig, start_simulator

LATENCY = "latency_ms=30"  # pages take long enough to overlap at the server


def _concurrent_drifting_sweep(sim, *, drift_batches: int, max_passes: int):
    sim.set_faults(f"{LATENCY},drift=0.5")
    rows = []
    with PlatformClient(client_settings(sim, concurrency=4, page_size=10), max_passes=max_passes) as client:
        for number, batch in enumerate(client.iter_stream("active_lessons")):
            rows.extend(batch.records.to_pylist())
            if number == drift_batches:
                sim.set_faults(LATENCY)
        return rows, client.last_run_stats()


def _most_pages_in_flight(sim) -> int:
    """The most listing pages the server was answering at one time (the first-page probe asks pageSize=1)."""
    pages = [
        r
        for r in sim.request_log()
        if urlsplit(r.path).path == "/v1/active-lessons" and parse_qs(urlsplit(r.path).query).get("pageSize") == ["10"]
    ]
    return max(sum(1 for o in pages if o.arrived < p.answered and p.arrived < o.answered) for p in pages)


def test_drift_with_pages_in_flight_together_is_detected_and_swept_again():
    with start_simulator(SimulatorConfig(seed=3, scale="tiny", order="last_date")) as sim:
        rows, stats = _concurrent_drifting_sweep(sim, drift_batches=12, max_passes=3)
        moves = sim.stats()["faults"]["drift_moves"]
        in_flight = _most_pages_in_flight(sim)
        expected = expected_tables(truth(sim, "active_lessons"))
    assert in_flight >= 3  # the listing's pages really were fetched concurrently
    assert moves > 0 and stats.passes >= 2 and stats.complete
    assert_same_table("active_lessons", rows, expected["active_lessons"])


def test_one_concurrent_pass_under_drift_misses_records_and_says_incomplete():
    """The control: concurrent paging under drift does skip records in one pass, and the client says so."""
    with start_simulator(SimulatorConfig(seed=3, scale="tiny", order="last_date")) as sim:
        rows, stats = _concurrent_drifting_sweep(sim, drift_batches=10_000, max_passes=1)
        in_flight = _most_pages_in_flight(sim)
        expected = expected_tables(truth(sim, "active_lessons"))
    assert in_flight >= 3
    assert not stats.complete
    missing = keyed("active_lessons", expected["active_lessons"]).keys() - keyed("active_lessons", rows).keys()
    assert missing
