"""Named points in the commit path (`parts_written` also as `parts_written:<stream>`, right after it),
`fetch_ended:<stream>` where a background fetch ends, `raw_checks:<stream>` where the checks of a committed stream
begin (pipeline/defs/raw/checking.py), `iceberg_catalog` where the Iceberg mirror opens its catalog
and `iceberg_committed` where it has brought a raw table's Iceberg table up and not yet recorded it. Crash-safety
tests install a listener that SIGKILLs the process at one of them, ordering tests one that holds a thread there; in
production nothing listens and reaching a point costs a function call."""

from __future__ import annotations

from collections.abc import Callable

_listener: Callable[[str], None] | None = None


def on_point(listener: Callable[[str], None] | None) -> None:
    global _listener
    _listener = listener


def reached(point: str) -> None:
    if _listener is not None:
        _listener(point)
