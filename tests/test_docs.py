from pipeline.docs import TARGET, render


def test_tables_doc_is_current():
    assert TARGET.read_text() == render(), "docs/TABLES.md is stale: run `python -m pipeline.docs`"


def test_every_column_is_documented():
    undocumented = [line for line in render().splitlines() if line.startswith("| ") and line.endswith("|  |")]
    assert undocumented == []
