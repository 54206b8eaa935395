"""Small text tables for the console (the demo's summaries), in plain Python: no dataframe library for a few rows."""

from __future__ import annotations

from collections.abc import Sequence


def text_table(columns: Sequence[str], rows: Sequence[Sequence[object]], missing: str = "-") -> str:
    """The header and one line per row, each column right-aligned to its widest cell; None shows as `missing`."""
    cells = [list(columns), *([missing if value is None else str(value) for value in row] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join(" ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)) for line in cells)
