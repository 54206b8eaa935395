"""A package's face that imports each public name from its module when first asked for (PEP 562), so a process
that needs one corner of the package loads only that: the webhook receiver no DuckDB, a decode worker no HTTP
client. Type checkers and import-linter read the names from the face's `if TYPE_CHECKING:` imports."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module


def lazy_names(package: str, exports: Mapping[str, str]) -> Callable[[str], object]:
    """The module-level `__getattr__` of `package`: `exports` maps each public name to the submodule defining it."""

    def __getattr__(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{exports[name]}"), name)
        setattr(sys.modules[package], name, value)  # asked once
        return value

    return __getattr__
