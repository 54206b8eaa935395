"""The contract between the platform and the warehouse, as data: record models (models.py), how a model's
records become columns (columns.py), every warehouse table (tables.py: TableSpec, TABLES), what a stream is and
the registry everything derives from (streams.py: StreamSpec, SyncStream, SYNC_STREAMS, STREAMS), and every
stream LessonSync syncs, declared once (declarations.py).

Everything imports it (the HTTP client, the warehouse, the webhooks, the Dagster definitions, the docs)
without loading the client; it imports nothing of ours outside itself (import-linter checks it).
"""

# Declaring the streams fills the registries (SYNC_STREAMS, STREAMS, TABLES, BUILDS): done here, when the package is
# imported, so they are whole whichever contract module is imported first.
import pipeline.contract.declarations  # noqa: F401
