"""The contract between the platform and the warehouse, as data: record models (models.py), how a model's
records become columns (columns.py), every warehouse table (tables.py: TableSpec, TABLES) and every stream
of the API (streams.py: StreamSpec, STREAMS).

Everything imports it (the HTTP client, the warehouse, the webhooks, the Dagster definitions, the docs)
without loading the client; it imports nothing of ours outside itself (import-linter checks it).
"""
