"""Decoded snapshot pages kept on disk (pipeline/source/page_cache.py), over real HTTP against the simulator: a page
served again comes from the cache equal to its decoding, anything else is decoded, and the cache holds one run."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import client_settings, rows_by_table, truth

from pipeline.contract.streams import SYNC_STREAMS
from pipeline.source import page_cache
from pipeline.source.client import PlatformClient
from pipeline.source.page_cache import PageCache
from simulator import SimulatorHandle

SNAPSHOTS = tuple(name for name, stream in SYNC_STREAMS.items() if stream.kind == "snapshot")


def pull(
    sim: SimulatorHandle, cache: Path | None, streams: tuple[str, ...] = SNAPSHOTS
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int]]:
    """Every row of `streams`, and per stream how many of its pages came from the cache."""
    batches, from_cache = [], {}
    with PlatformClient(client_settings(sim), page_cache=cache) as client:
        for stream in streams:
            batches += list(client.iter_stream(stream))
            stats = client.last_run_stats()
            assert stats.pages > 0 and stats.complete
            from_cache[stream] = stats.pages_from_cache if stats.pages_from_cache < stats.pages else -1  # -1: all
    # the users of each group are listed concurrently: rows in the order their pages arrived, sorted here
    return {table: sorted(rows, key=repr) for table, rows in rows_by_table(batches).items()}, from_cache


def test_pages_served_again_come_from_the_cache(sim: SimulatorHandle, tmp_path: Path) -> None:
    first, cached_first = pull(sim, tmp_path / "cache")
    second, cached_second = pull(sim, tmp_path / "cache")
    assert cached_first == dict.fromkeys(SNAPSHOTS, 0)
    assert cached_second == dict.fromkeys(SNAPSHOTS, -1)  # every page
    assert second == first == pull(sim, None)[0]  # row for row what decoding every page gives
    assert {row["id"] for row in second["groups"]} == {row["id"] for row in truth(sim, "groups")["groups"]}


def test_a_cached_page_equals_its_decoding(
    sim: SimulatorHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches, counts and the key hashes drift detection compares (computed again: they are per process)."""
    pull(sim, tmp_path / "cache", ("groups", "lessons"))
    pairs = []
    original = PageCache.page

    def both(self: PageCache, location: Any, body: bytes, key_fields: Any, decode: Any) -> Any:
        page = original(self, location, body, key_fields, decode)
        pairs.append((page, decode(body)))
        return page

    monkeypatch.setattr(PageCache, "page", both)
    pull(sim, tmp_path / "cache", ("groups", "lessons"))
    # all but a page the pager may have read ahead past the last one this time and not the first
    hits = [(cached, decoded) for cached, decoded in pairs if cached.from_cache]
    assert len(hits) >= len(pairs) - 1 and len(hits) > 3
    with_keys = 0
    for cached, decoded in hits:
        assert (cached.location, cached.served, cached.records) == (decoded.location, decoded.served, decoded.records)
        assert [(b.table, b.endpoint, b.page) for b in cached.batches] == [
            (b.table, b.endpoint, b.page) for b in decoded.batches
        ]
        assert all(c.records.equals(d.records) for c, d in zip(cached.batches, decoded.batches, strict=True))
        assert (cached.key_hashes is None) == (decoded.key_hashes is None)
        if decoded.key_hashes is not None:
            with_keys += 1
            assert np.array_equal(cached.key_hashes, decoded.key_hashes)
    assert with_keys > 3


def entries(cache: Path, stream: str) -> dict[str, page_cache.Entry]:
    """Every whole entry of the packs of `stream` in `cache`."""
    found: dict[str, page_cache.Entry] = {}
    for pack in cache.glob(f"{stream}-*{page_cache.PACK}"):
        found.update(page_cache.pack_entries(pack))
    return found


def test_new_code_or_an_unreadable_entry_is_decoded_again(
    sim: SimulatorHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    expected, _ = pull(sim, cache, ("lessons",))
    monkeypatch.setattr(page_cache, "_FINGERPRINT", b"other decoding code")
    rows, cached = pull(sim, cache, ("lessons",))
    assert cached == {"lessons": 0} and rows == expected
    for pack, offset, length in entries(cache, "lessons").values():  # every payload overwritten, lengths kept
        with open(pack, "r+b") as file:
            file.seek(offset)
            file.write(b"\xff" * length)
    with caplog.at_level(logging.WARNING, logger="lessonsync.source"):
        rows, cached = pull(sim, cache, ("lessons",))
    assert cached == {"lessons": 0} and rows == expected
    assert "could not be read" in caplog.text


def test_a_pack_cut_short_keeps_its_whole_entries(sim: SimulatorHandle, tmp_path: Path) -> None:
    """A run killed while appending leaves a pack that ends inside an entry: the entries before it are read, the
    cut one is decoded again."""
    cache = tmp_path / "cache"
    expected, _ = pull(sim, cache, ("lessons",))
    (pack,) = cache.glob(f"lessons-*{page_cache.PACK}")
    whole = page_cache.pack_entries(pack)
    assert len(whole) >= 2
    _, offset, length = max(whole.values(), key=lambda entry: entry[1])  # the last entry
    with open(pack, "r+b") as file:
        file.truncate(offset + length // 2)
    assert len(page_cache.pack_entries(pack)) == len(whole) - 1
    with PlatformClient(client_settings(sim), page_cache=cache) as client:
        rows = sorted(rows_by_table(list(client.iter_stream("lessons")))["lessons"], key=repr)
        stats = client.last_run_stats()
    assert rows == expected["lessons"] and stats.pages_from_cache == len(whole) - 1


def test_the_cache_keeps_the_pages_of_the_last_run(sim: SimulatorHandle, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    pull(sim, cache, ("groups",))
    assert entries(cache, "groups") and entries(cache, "group_users")
    assert all(p.name.startswith(("groups-", "group_users-")) for p in cache.iterdir())
    first_run = {p.name for p in cache.iterdir()}
    planted = [
        cache / f"groups-0000{page_cache.PACK}",
        cache / f"group_users-0000{page_cache.PACK}",
        cache / f"lessons-0000{page_cache.PACK}",
        cache / f"groups-1a2b{page_cache.LEGACY_ENTRY}",
    ]
    for path in planted:
        path.write_bytes(b"an older night's pack")
    for path in cache.iterdir():  # all written long ago: what the next run reads back is kept, the rest removed
        os.utime(path, (1, 1))
    with PlatformClient(client_settings(sim), page_cache=cache) as client:
        list(client.iter_stream("groups"))
        stats = client.last_run_stats()
    assert stats.pages_from_cache == stats.pages  # every page read back
    # the first run's packs served every page again: kept whole, nothing copied; other streams' packs stay
    names = {p.name for p in cache.iterdir()}
    assert first_run | {f"lessons-0000{page_cache.PACK}"} <= names
    assert not names & {path.name for path in planted if not path.name.startswith("lessons-")}
    kept = {name for pack in first_run for name in page_cache.pack_entries(cache / pack)}
    for pack in names - first_run - {f"lessons-0000{page_cache.PACK}"}:
        # a pack of this run may only hold a page the first run never stored (a page asked past the end of a
        # listing, cancelled in one run and answered in the other, depending on timing), never a copy
        assert not set(page_cache.pack_entries(cache / pack)) & kept, pack


def test_a_pack_mostly_unused_is_removed_and_the_pages_read_back_kept(sim: SimulatorHandle, tmp_path: Path) -> None:
    """After a day of changes most of a night's pages are not served again: their pack goes, and the few that were
    are copied to the new run's pack first (fails if the pack stays or the copies are missing)."""
    cache = tmp_path / "cache"
    pull(sim, cache, ("lessons",))
    (pack,) = cache.glob(f"lessons-*{page_cache.PACK}")
    served = page_cache.pack_entries(pack)
    with open(pack, "ab") as file:  # an older night's pages no longer served, more of them than those served again
        for number in range(len(served) + 1):
            name = f"lessons-gone{number}".encode()
            file.write(page_cache._ENTRY.pack(5, len(name)) + name + b"stale")
    os.utime(pack, (1, 1))
    rows, cached = pull(sim, cache, ("lessons",))
    assert cached == {"lessons": -1} and not pack.exists()
    (copy,) = cache.glob(f"lessons-*{page_cache.PACK}")
    copied = page_cache.pack_entries(copy)
    # all but a page the pager may have read ahead past the last one the first time and not this time
    assert set(copied) <= set(served) and len(copied) >= len(served) - 1 >= 1
    assert pull(sim, cache, ("lessons",)) == (rows, {"lessons": -1})


def test_only_snapshot_pages_are_kept(sim: SimulatorHandle, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _, cached = pull(sim, cache, ("active_lessons",))
    assert cached == {"active_lessons": 0} and not cache.exists()
    assert page_cache.cacheable("users") and not page_cache.cacheable("answers")


def test_the_cache_lives_in_the_data_directory_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.settings import load_settings

    monkeypatch.setenv("LESSONSYNC_DATA_DIR", "/srv/lessonsync")
    assert load_settings().page_cache_dir == Path("/srv/lessonsync/cache/pages")
    monkeypatch.setenv("LESSONSYNC_PAGE_CACHE", "false")
    assert load_settings().page_cache_dir is None


def test_a_cache_that_cannot_be_written_warns_once_and_loses_nothing(
    sim: SimulatorHandle, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the cache directory should be")
    expected, _ = pull(sim, None, ("groups",))
    with caplog.at_level(logging.WARNING, logger="lessonsync.source"):
        rows, cached = pull(sim, blocked / "pages", ("groups",))
    assert rows == expected and cached == {"groups": 0}
    assert caplog.text.count("could not be written") == 1


def test_entries_are_written_off_the_event_loop_and_all_written_by_close(
    sim: SimulatorHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A miss's file is written by the cache's writer thread, not the client's loop; closing the client waits for
    them, so the next run finds every page (fails if the writes stay on the loop or close does not wait)."""
    writers: list[str] = []
    original = PageCache._write

    def slow_write(self: PageCache, stream: str, name: str, parts: Any) -> None:
        writers.append(threading.current_thread().name)
        time.sleep(0.01)  # a busy disk: the loop must not wait for it, close must
        original(self, stream, name, parts)

    monkeypatch.setattr(PageCache, "_write", slow_write)
    monkeypatch.setattr(page_cache, "WRITES_PENDING", 100_000)  # never behind here: every write is the thread's
    pull(sim, tmp_path / "cache", ("groups",))
    assert writers and all(name.startswith("lessonsync-page-cache") for name in writers)
    monkeypatch.setattr(PageCache, "_write", original)
    assert pull(sim, tmp_path / "cache", ("groups",))[1] == {"groups": -1}


def test_a_writer_that_falls_behind_hands_the_write_back_to_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most WRITES_PENDING serialized pages wait for the writer: beyond that the caller writes (bounded memory)."""
    cache = PageCache(tmp_path / "cache")
    release = threading.Event()
    callers: list[str] = []
    original = PageCache._write

    def held(self: PageCache, stream: str, name: str, parts: Any) -> None:
        callers.append(threading.current_thread().name)
        if threading.current_thread().name.startswith("lessonsync-page-cache"):
            release.wait(10)
        original(self, stream, name, parts)

    monkeypatch.setattr(PageCache, "_write", held)
    for number in range(page_cache.WRITES_PENDING + 3):
        cache._write_later("groups", f"groups-{number}", [b"entry"])
    here = [name for name in callers if not name.startswith("lessonsync-page-cache")]
    assert len(here) == 3  # the writer holds its first entry, WRITES_PENDING - 1 more wait; 3 are written here
    release.set()
    cache.close()
    assert len(entries(tmp_path / "cache", "groups")) == page_cache.WRITES_PENDING + 3
