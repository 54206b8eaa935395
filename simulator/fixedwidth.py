"""Vectorised formatting of instants and epoch-millisecond timestamps into fixed-width byte rows.

Formatting a date-time per row in Python costs microseconds; here every digit of a page is computed
with numpy operations on whole columns (scalar divisors, contiguous writes into a transposed buffer),
a fraction of a microsecond per row. Valid for 13-digit epoch milliseconds (2001-09-09 to 2286-11-20),
far wider than any simulated history; callers check `supported` and fall back otherwise.
"""

from __future__ import annotations

import numpy as np

LOW_MS, HIGH_MS = 10**12, 10**13
_ISO = b"0000-00-00T00:00:00.000Z"
_ISO_FIELDS = ((0, 4), (5, 2), (8, 2), (11, 2), (14, 2), (17, 2), (20, 3))  # (offset, digits) Y M D h m s ms
_TAIL = b',"lastDate":"' + _ISO + b'","startTimeStamp":0000000000000,"endTimeStamp":0000000000000},'
_TAIL_ISO_AT = len(b',"lastDate":"')
_TAIL_BEGIN_AT = _TAIL.index(b"0000000000000")
_TAIL_END_AT = _TAIL.rindex(b"0000000000000")


def supported(*arrays: np.ndarray) -> bool:
    return all(len(a) == 0 or (int(a.min()) >= LOW_MS and int(a.max()) < HIGH_MS) for a in arrays)


def _blank(template: bytes, rows: int) -> np.ndarray:
    """(len(template), rows): one contiguous line per byte position, so digit writes are contiguous."""
    out = np.empty((len(template), rows), dtype=np.uint8)
    out[:] = np.frombuffer(template, dtype=np.uint8)[:, None]
    return out


def _finish(out: np.ndarray) -> list[bytes]:
    return np.ascontiguousarray(out.T).view(f"S{out.shape[0]}").ravel().tolist()


def _put(out: np.ndarray, at: int, values: np.ndarray, width: int) -> None:
    """Zero-padded decimal digits of `values` (below 10**width, int32-safe) at byte positions at..at+width-1."""
    rest = values.astype(np.int32)
    for place in range(at + width - 1, at - 1, -1):
        quotient = rest // 10
        out[place] = rest - quotient * 10 + 48
        rest = quotient


def _put13(out: np.ndarray, at: int, values: np.ndarray) -> None:
    high = values // 1_000_000
    _put(out, at, high, 7)
    _put(out, at + 7, values - high * 1_000_000, 6)


def _civil(ms: np.ndarray) -> tuple[np.ndarray, ...]:
    """(year, month, day, hour, minute, second, millisecond) per instant (H. Hinnant's civil_from_days)."""
    days = ms // 86_400_000
    of_day = ms - days * 86_400_000
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + (month <= 2)
    hours = of_day // 3_600_000
    rest = of_day - hours * 3_600_000
    minutes = rest // 60_000
    rest = rest - minutes * 60_000
    seconds = rest // 1000
    return year, month, day, hours, minutes, seconds, rest - seconds * 1000


def _put_iso(out: np.ndarray, at: int, ms: np.ndarray) -> None:
    for (offset, width), values in zip(_ISO_FIELDS, _civil(ms), strict=False):
        _put(out, at + offset, values, width)


def iso_bytes(ms: np.ndarray) -> list[bytes]:
    """`2026-11-01T08:30:00.000Z` per instant, as bytes."""
    out = _blank(_ISO, len(ms))
    _put_iso(out, 0, np.asarray(ms, dtype=np.int64))
    return _finish(out)


def answer_tails(begin_ms: np.ndarray, end_ms: np.ndarray) -> list[bytes]:
    """`,"lastDate":"<end ISO>","startTimeStamp":<begin>,"endTimeStamp":<end>},` per answer."""
    out = _blank(_TAIL, len(end_ms))
    _put_iso(out, _TAIL_ISO_AT, end_ms)
    _put13(out, _TAIL_BEGIN_AT, begin_ms)
    _put13(out, _TAIL_END_AT, end_ms)
    return _finish(out)
