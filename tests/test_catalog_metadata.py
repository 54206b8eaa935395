"""What catalogs read: every raw lms/* asset declares its columns with their descriptions (from the table
declarations), DuckDB table name and key; the `lessonsync sync` summary lists loads one per line and the models' build apart."""

from dagster import AssetKey

from pipeline.cli.sync import summary_lines
from pipeline.contract.tables import TABLES
from pipeline.defs.code_location import build_definitions
from pipeline.settings import load_settings
from pipeline.warehouse.duck.schema import table_def


def test_every_raw_asset_declares_its_columns_and_table_name():
    graph = build_definitions(load_settings()).resolve_asset_graph()
    raw = [key for key in graph.get_all_asset_keys() if key.path[0] == "lms"]
    assert len(raw) >= 13
    for key in raw:
        metadata = graph.get(key).metadata
        table = key.path[-1]
        assert metadata["dagster/table_name"] == f"lms.{table}"
        columns = [c.name for c in metadata["dagster/column_schema"].columns]
        if table in TABLES:  # the data columns, then the load metadata columns, as the warehouse holds them
            assert columns == list(table_def(TABLES[table]).column_names), table
        assert all(c.type and c.description for c in metadata["dagster/column_schema"].columns), table
    assert graph.get(AssetKey(["lms", "answers"])).metadata["primary_key"] == ", ".join(TABLES["answers"].key)


def test_the_summary_lists_loads_then_the_models_apart():
    lines = summary_lines(
        {
            "lms/groups": {
                "rows_fetched": 20,
                "rows_inserted": 1,
                "rows_updated": 0,
                "rows_deleted": 2,
                "dagster/row_count": 19,
            },
            "lms/certificates": {"events_loaded": 3, "dagster/row_count": 7},
            **{f"analytics/model_{i}": {"dagster/row_count": 1000 + i, "seconds": 0.1} for i in range(20)},
            "analytics/published": {"published_at": "2026-12-02T00:00:00+00:00", "models_unchanged": ["a", "b", "c"]},
        }
    )
    assert lines[0].startswith("lms/certificates") and lines[1].startswith("lms/groups")
    assert "rows now         19" in lines[1] and "deleted       2" in lines[1]
    assert lines[2].startswith("models built: 20 (rows) model_0 1,000, model_1 1,001")
    assert len(lines) < 2 + 20 and not any(line.startswith("analytics/") for line in lines)
    assert lines[-1] == "models unchanged since their last build (inputs the same): 3"


def test_the_summary_names_the_iceberg_tables_the_background_mirror_wrote_too():
    """The raw tables' mirror writes while the streams fetch: a cron user's summary names those writes too."""
    lines = summary_lines(
        {
            "lake/iceberg_tables": {
                "tables_written": ["lms.groups"],
                "background_tables_written": ["lms.answers", "lms.groups"],
            },
            "lake/iceberg_marts": {"tables_written": []},
        }
    )
    assert lines == [
        f"{'lake/iceberg_marts':32} Iceberg tables written: none",
        f"{'lake/iceberg_tables':32} Iceberg tables written: lms.answers, lms.groups",
    ]
