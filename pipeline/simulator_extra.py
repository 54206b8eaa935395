"""The platform simulator is a separate distribution (`lessonsync-simulator`, simulator/ of the repository): the product never
imports it; the harness that runs against it (the demo, the test stack, `lessonsync simulate`) imports it
inside `simulator_extra`, so an install without the extra says what to install, not a bare ModuleNotFoundError."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

INSTALL_HINT = "pip install ./simulator (the lessonsync-simulator distribution in LessonSync's repository)"
# Top-level modules only the extra provides: the simulator package's own web framework, and the package itself.
EXTRA_MODULES = frozenset({"simulator", "fastapi"})


class SimulatorNotInstalled(ImportError):
    """The simulator extra is missing; the message names what needed it and the install command."""


@contextmanager
def simulator_extra(needed_by: str) -> Iterator[None]:
    """Around imports of `simulator`: a module of the extra that is missing becomes SimulatorNotInstalled."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in EXTRA_MODULES:
            raise
        raise SimulatorNotInstalled(
            f"{needed_by} needs the platform simulator, an optional extra that is not installed "
            f"(no module {exc.name!r}): {INSTALL_HINT}"
        ) from None
