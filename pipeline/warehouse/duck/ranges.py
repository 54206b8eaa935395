"""Ranges of a key column, so that work over millions of rows (a link check's hash table) runs piece by piece
within DuckDB's memory limit instead of on the whole table at once."""

from __future__ import annotations

import duckdb

from pipeline.warehouse.duck.connection import scalar

SAMPLE_ROWS = 20_000


def range_bounds(
    conn: duckdb.DuckDBPyConnection, rows: str, c_col: str, params: dict[str, object], chunk_rows: int
) -> list[object] | None:
    """Ascending boundaries splitting column `c_col` of `rows` (a subquery aliased `c`) into ranges of about
    `chunk_rows` rows (from a sample: any boundaries give an exact result, they only size the pieces), or None
    when the rows are few enough to be taken whole."""
    count = int(scalar(conn, f"SELECT count(*) FROM {rows} AS c", params or None))
    if count <= chunk_rows:
        return None
    pieces = -(-count // chunk_rows)
    # sorted and deduplicated by DuckDB, so the ranges follow its ordering of the column's type
    sample = (
        conn.execute(
            f"SELECT list_sort(list_distinct(list(v))) FROM (SELECT {c_col} AS v FROM {rows} AS c "
            f"WHERE {c_col} IS NOT NULL USING SAMPLE reservoir({SAMPLE_ROWS} ROWS) REPEATABLE (7))",
            params or None,
        ).fetchall()[0][0]
        or []
    )
    picks = sorted({len(sample) * i // pieces for i in range(1, pieces)} - {0})
    return [sample[i] for i in picks] or None


def key_ranges(bounds: list[object], column: str) -> list[tuple[str, dict[str, object]]]:
    """(condition on `column`, its parameters) for each range between consecutive `bounds`, open at both ends,
    in ascending order; NULL is in none of them."""
    ranges = []
    for lowest, highest in zip([None, *bounds], [*bounds, None], strict=True):
        parts = [(f"{column} >= $lowest", {"lowest": lowest})] if lowest is not None else []
        parts += [(f"{column} < $highest", {"highest": highest})] if highest is not None else []
        ranges.append((" AND ".join(p for p, _ in parts), {k: v for _, part in parts for k, v in part.items()}))
    return ranges
