"""The mirror's own Iceberg schemas and data-file entries equal pyiceberg's, its FileIO behaves as a FileIO must, and a
sync never imports pyiceberg's Arrow IO (pyarrow.dataset with it) nor its fsspec FileIO (its REST catalog with it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from iceberg_helpers import ICEBERG_ENV
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import parquet_file_to_data_file

from pipeline.stack import local_stack
from pipeline.warehouse.lake.iceberg_files import ARROW_DOC, FILE_IO, data_file, iceberg_schema
from pipeline.warehouse.lake.iceberg_io import LakeFileIO

# Every column type the mirror's tables hold, with nulls, an all-null column, strings past the truncation length
# (ASCII and not), a value at the top of a code point range, and lists.
ROWS = """
SELECT
    i::BIGINT AS id,
    (i % 7)::INTEGER AS small,
    'key-' || lpad(i::VARCHAR, 6, '0') || repeat('x', (i % 30)::INTEGER) AS long_text,
    CASE WHEN i % 5 = 0 THEN NULL ELSE 'é€𝄞' || i::VARCHAR END AS unicode_text,
    CASE WHEN i = 2999 THEN repeat(chr(1114111), 20) ELSE 'a' END AS top_code_points,
    i % 3 = 0 AS flag,
    i / 7.0 AS ratio,
    TIMESTAMPTZ '2026-01-01 00:00:00+00' + to_seconds(i) AS at,
    DATE '2026-01-01' + (i % 400)::INTEGER AS day,
    NULL::VARCHAR AS nothing,
    CASE WHEN i % 4 = 0 THEN NULL ELSE ['a' || i::VARCHAR, 'b'] END AS tags,
    '{"k": ' || i::VARCHAR || '}' AS extra
FROM range(3000) t(i)
"""


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    catalog = SqlCatalog(
        "test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse", **FILE_IO
    )
    catalog.create_namespace("lms")
    return catalog


def written_files(tmp_path: Path) -> tuple[pa.Schema, list[str]]:
    """The rows as the mirror writes them (pipeline/warehouse/lake/iceberg.py, _write_data_files): several files
    of one row group each."""
    conn = duckdb.connect()
    schema = conn.sql(ROWS + " LIMIT 0").to_arrow_table().schema
    schema = pa.schema([f.with_metadata({ARROW_DOC: f"the {f.name}".encode()}) for f in schema])
    conn.execute(
        f"COPY ({ROWS}) TO '{tmp_path}/staged' "
        "(FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 1000, ROW_GROUPS_PER_FILE 1)"
    )
    return schema, sorted(str(p) for p in (tmp_path / "staged").glob("*.parquet"))


def test_the_schema_and_each_data_file_are_pyicebergs_own(tmp_path: Path, catalog: SqlCatalog) -> None:
    schema, files = written_files(tmp_path)
    assert len(files) >= 2
    ours = iceberg_schema(schema)
    assert not isinstance(ours, pa.Schema)
    theirs = catalog.create_table(("lms", "theirs"), schema=schema)
    table = catalog.create_table(("lms", "ours"), schema=ours)
    assert table.schema() == theirs.schema()
    assert [f.doc for f in table.schema().fields] == [f"the {name}" for name in schema.names]
    with table.transaction() as tx:
        tx.set_properties({"schema.name-mapping.default": tx.table_metadata.schema().name_mapping.model_dump_json()})
    for path in files:
        mine = data_file(table.io, table.metadata, f"file://{path}")
        expected = parquet_file_to_data_file(table.io, table.metadata, f"file://{path}")
        for name in (
            "record_count",
            "file_size_in_bytes",
            "column_sizes",
            "value_counts",
            "null_value_counts",
            "nan_value_counts",
            "lower_bounds",
            "upper_bounds",
            "split_offsets",
            "partition",
        ):
            assert getattr(mine, name) == getattr(expected, name), name
        assert mine.lower_bounds and mine.upper_bounds  # the comparison above compared something


def test_a_column_this_module_does_not_map_is_left_to_pyiceberg() -> None:
    schema = pa.schema([pa.field("s", pa.struct([("a", pa.int64())]))])
    assert iceberg_schema(schema) is schema


def test_a_mirrored_sync_never_imports_pyicebergs_arrow_io_nor_its_rest_catalog(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from pipeline.settings import Settings\n"
        "from pipeline.sync import run_sync\n"
        "report = run_sync(Settings(), select=['key:lms/*'])\n"
        "assert report.success, report.error\n"
        "print(sorted(m for m in ('pyarrow.dataset', 'pyiceberg.io.pyarrow', 'pyiceberg.catalog.sql', "
        "'pyiceberg.io.fsspec', 'pyiceberg.catalog.rest', 'requests', 'jwt') if m in sys.modules))\n"
    )
    (tmp_path / "home").mkdir()
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        env = {**os.environ, **stack.env, **ICEBERG_ENV, "DAGSTER_HOME": str(tmp_path / "home")}
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    # the mirror ran (its catalog is imported), without pyiceberg's Arrow IO
    assert done.stdout.strip().splitlines()[-1] == "['pyiceberg.catalog.sql']"


def test_the_file_io_writes_reads_sizes_and_deletes_local_files_and_names_what_is_missing(tmp_path: Path) -> None:
    io = LakeFileIO(FILE_IO)
    location = f"file://{tmp_path}/a/new/directory/file.bin"
    output = io.new_output(location)
    assert not output.exists()
    with output.create() as stream:  # its directories made, as pyiceberg's local FileIO makes them
        stream.write(b"0123456789")
    assert output.exists() and len(output) == 10
    with pytest.raises(FileExistsError, match="file.bin"):
        output.create()
    with output.create(overwrite=True) as stream:
        stream.write(b"abc")
    source = output.to_input_file()
    assert len(source) == 3 and len(io.new_input(str(tmp_path / "a/new/directory/file.bin"))) == 3  # a plain path
    with source.open() as stream:
        stream.seek(1)
        assert stream.read() == b"bc"
    io.delete(source)
    assert not io.new_input(location).exists()
    with pytest.raises(FileNotFoundError) as missing:
        io.new_input(location).open()
    assert "file.bin" in str(missing.value)
    with pytest.raises(FileNotFoundError):
        io.delete(location)
    with pytest.raises(ValueError, match="gs://bucket/table"):
        io.new_input("gs://bucket/table/metadata.json")
