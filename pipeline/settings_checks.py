"""The bounds of the LESSONSYNC_* settings (docs/settings.md states each) and the checks pydantic's constraints
cannot make: the DuckDB memory limit read as bytes and held to what a sync needs, and a platform address that
already ends in the /v1 LessonSync adds. Each check returns the problem as text (None when there is none); the
settings' validators raise it, so it reaches the one-line `invalid settings: LESSONSYNC_NAME: ...` error.

Every bound is finite: a value such as `inf` or `1e308` would otherwise switch a limit off without a word."""

from __future__ import annotations

import os
import re
from typing import Final
from urllib.parse import urlsplit

# The value of a setting LessonSync chooses itself: the first page number (probed once per client), the DuckDB
# memory limit (from the machine when the warehouse is opened). Its one spelling; the settings and the code that
# resolves it compare against this.
AUTO: Final = "auto"

MINUTE = 60.0
HOUR = 3_600.0
DAY = 86_400.0
YEAR_HOURS = 8_760.0
KIB, MIB, GIB, TIB = 1 << 10, 1 << 20, 1 << 30, 1 << 40

# Timeouts and waits, in seconds. Below the floor no answer can arrive (a head, a body, the platform's next bytes:
# even loopback under load takes milliseconds); above a day a timeout no longer bounds anything an operator waits
# for, so a larger value is a typo or an attempt to switch the limit off.
MIN_TIMEOUT = 0.1
MAX_TIMEOUT = DAY
# The receiver's per-connection timers guard against slow clients: an hour is already far beyond any sender.
MAX_RECEIVER_TIMEOUT = HOUR

# The DuckDB memory limit of every warehouse connection. 64MiB is the limit the early insert runs DuckDB under on
# one thread (pipeline/warehouse/loading/early_insert.py), and a tiny sync completes within it on two threads;
# below it DuckDB fails a sync's first statements ("failed to allocate") instead of spilling. 16TiB is above any
# machine's memory: a larger value means no limit at all.
MIN_DUCKDB_MEMORY = 64 * MIB
MAX_DUCKDB_MEMORY = 16 * TIB
_DUCKDB_UNITS = {  # DuckDB's memory_limit units (case-insensitive): 1000^i and 1024^i bytes
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": KIB,
    "mib": MIB,
    "gib": GIB,
    "tib": TIB,
}
_MEMORY_SIZE = re.compile(r"(?P<number>(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)\s*(?P<unit>[a-z]+|%)", re.IGNORECASE)


def duckdb_memory_bytes(text: str, machine_memory: int | None) -> int | None:
    """The bytes a DuckDB memory_limit DuckDB's parser accepts stands for (a percentage: of `machine_memory`);
    None for what is not a positive number and a unit (a negative value, which DuckDB reads as no limit, or a
    percentage when the machine's memory is unknown)."""
    match = _MEMORY_SIZE.fullmatch(text.strip())
    if match is None:
        return None
    number, unit = float(match["number"]), match["unit"].lower()
    if unit == "%":
        return None if machine_memory is None else int(machine_memory * number / 100)
    return int(number * _DUCKDB_UNITS[unit]) if unit in _DUCKDB_UNITS else None


def duckdb_memory_limit_problem(text: str) -> str | None:
    """Why `text`, a memory_limit DuckDB's parser accepts, is no limit a sync can work within; None when it is."""
    hint = f"write a size from {MIN_DUCKDB_MEMORY // MIB}MiB, e.g. 2GB or 512MiB, or auto"
    if text.strip().startswith("-"):
        return f"{text!r} is negative, which DuckDB reads as no limit at all; {hint}"
    machine = machine_memory()
    size = duckdb_memory_bytes(text, machine)
    if size is None:
        if text.strip().endswith("%") and machine is None:
            return None  # DuckDB resolves a share of a memory this platform does not report: its own check stands
        return f"{text!r} is not a number and a unit; {hint}"
    of_machine = f" of this machine's {machine / GIB:.1f}GiB" if text.strip().endswith("%") and machine else ""
    if size < MIN_DUCKDB_MEMORY:
        shown = f"{size / MIB:.1f}MiB" if size >= MIB else f"{size:,} bytes"
        return f"{text!r} ({shown}{of_machine}) is below the {MIN_DUCKDB_MEMORY // MIB}MiB a sync needs; {hint}"
    if size > MAX_DUCKDB_MEMORY:
        return f"{text!r} is above {MAX_DUCKDB_MEMORY // TIB}TiB, more than any machine has: no limit at all; {hint}"
    return None


def machine_memory() -> int | None:
    """The machine's physical memory in bytes, what DuckDB takes a percentage of; None where it is not reported."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def api_prefix_problem(address: str) -> str | None:
    """Why `address` (an absolute http(s) address) is not the platform's root, None when it is: every API path
    starts with /v1 under the base address (the platform's API reference), which LessonSync adds itself, so
    an address ending in /v1 would be asked /v1/v1/token. A path before /v1 (a proxy's /lms) is a prefix and
    stays. The address itself is not repeated (it may carry credentials)."""
    path = urlsplit(address.strip()).path.rstrip("/")
    if path.lower().endswith("/v1"):
        return (
            "the address ends in /v1: give the platform's root, e.g. https://lms.example.com (or the path before "
            "/v1, e.g. https://host/lms); LessonSync adds /v1/... itself"
        )
    return None
