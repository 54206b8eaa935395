"""DuckDB statements of the certificate load. Table layouts come from the TableSpecs in tables.py."""

from __future__ import annotations


from pipeline.contract.tables import TableSpec
from pipeline.webhooks.tables import CERTIFICATE_EVENTS, PAYLOAD_FIELDS
from pipeline.warehouse.arrow_types import field_type

CREATE_STATE = """
CREATE TABLE IF NOT EXISTS lms.certificate_inbox_state (
    inbox_id VARCHAR PRIMARY KEY,
    high_water_mark BIGINT NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
)"""
READ_HWM = "SELECT high_water_mark FROM lms.certificate_inbox_state WHERE inbox_id = ?"
UPSERT_HWM = """
INSERT INTO lms.certificate_inbox_state (inbox_id, high_water_mark, updated_at) VALUES (?, ?, ?)
ON CONFLICT (inbox_id) DO UPDATE SET
    high_water_mark = greatest(high_water_mark, excluded.high_water_mark), updated_at = excluded.updated_at
"""

# Events of this chunk past the mark and not loaded before (a recreated inbox redelivers old ids).
# type_rank orders an expiry after a completion carrying the same updatedAt.
SELECT_NEW_EVENTS = """
CREATE OR REPLACE TEMP TABLE new_certificate_events AS
SELECT i.*, CASE i.event_type WHEN 'certificate_expired' THEN 1 ELSE 0 END AS type_rank
FROM incoming_certificate_events AS i
WHERE i.sequence > ?
  AND NOT EXISTS (SELECT 1 FROM lms.certificate_events AS e WHERE e.event_id = i.event_id)
QUALIFY row_number() OVER (PARTITION BY i.event_id ORDER BY i.sequence) = 1
"""
COUNT_NEW_BY_TYPE = "SELECT event_type, count(*) FROM new_certificate_events GROUP BY event_type"
COUNT_BY_STATE = "SELECT state, count(*) FROM lms.certificates GROUP BY state ORDER BY state"
COUNT_EVENTS_BY_TYPE = "SELECT event_type, count(*) FROM lms.certificate_events GROUP BY event_type ORDER BY 1"


def create_table(spec: TableSpec, extra_columns: list[str]) -> str:
    columns = [
        f"{f.name} {field_type(f, spec.name)}{'' if f.nullable else ' NOT NULL'}" for f in spec.schema
    ] + extra_columns + [f"PRIMARY KEY ({', '.join(spec.key)})"]
    return f"CREATE TABLE IF NOT EXISTS lms.{spec.name} (\n    " + ",\n    ".join(columns) + "\n)"


def insert_events() -> str:
    names = ", ".join(CERTIFICATE_EVENTS.schema.names)
    return (
        f"INSERT INTO lms.certificate_events ({names}, first_loaded_at, last_loaded_at) "
        f"SELECT {names}, ?, ? FROM new_certificate_events"
    )


_RANK_OF_CURRENT = "CASE c.last_event_type WHEN 'certificate_expired' THEN 1 ELSE 0 END"
# n (newest new event of an id) replaces c when its updatedAt is later; on equal updatedAt (or both
# missing) an expiry beats a completion, then the later receipt wins. A late, older completion loses.
_NEWER = f"""
    (n.updated_at IS NOT NULL AND (c.updated_at IS NULL OR n.updated_at > c.updated_at))
    OR (n.updated_at IS NOT DISTINCT FROM c.updated_at
        AND (n.type_rank > {_RANK_OF_CURRENT}
             OR (n.type_rank = {_RANK_OF_CURRENT} AND n.received_at > c.last_received_at)))"""
_STATE_VALUES = {
    "state": "CASE n.event_type WHEN 'certificate_expired' THEN 'expired' ELSE 'completed' END",
    "last_event_id": "n.event_id",
    "last_event_type": "n.event_type",
    "last_received_at": "n.received_at",
}


def merge_certificates() -> str:
    """Parameters: loaded_at three times (last_loaded_at on update; first and last on insert)."""
    values = {f.name: f"n.{f.name}" for f in PAYLOAD_FIELDS} | _STATE_VALUES
    updates = ", ".join(f"{name} = {value}" for name, value in values.items())
    return f"""
MERGE INTO lms.certificates AS c
USING (
    SELECT * FROM new_certificate_events
    QUALIFY row_number() OVER (
        PARTITION BY id ORDER BY updated_at DESC NULLS LAST, type_rank DESC, received_at DESC, sequence DESC
    ) = 1
) AS n
ON c.id = n.id
WHEN MATCHED AND ({_NEWER}) THEN UPDATE SET {updates}, last_loaded_at = ?
WHEN NOT MATCHED THEN INSERT ({", ".join(values)}, first_loaded_at, last_loaded_at)
    VALUES ({", ".join(values.values())}, ?, ?)
"""
