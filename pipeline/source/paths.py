"""Path parameters, percent-encoded so that an id addresses its own resource and nothing else."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

__all__ = ["encode_segment", "fill_path"]


def encode_segment(value: str) -> str:
    """One path segment, percent-encoded so that '/', '?', '#', ' ', '%' and non-ASCII stay inside it.

    Segments made only of dots are encoded too: httpx (like browsers) would resolve '.' and '..' away.
    """
    if value == "":
        raise ValueError("an empty id cannot address a resource (path segment would vanish)")
    if set(value) == {"."}:
        return value.replace(".", "%2E")
    return quote(value, safe="")


def fill_path(template: str, values: Mapping[str, str]) -> str:
    """`template` ("/v1/groups/{group_id}/users") with each placeholder percent-encoded."""
    return template.format(**{name: encode_segment(value) for name, value in values.items()})
