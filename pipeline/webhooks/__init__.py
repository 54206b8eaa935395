"""Certificate webhooks: an authenticated receiver that writes every delivery to a durable SQLite inbox
before answering 2xx, and the plain functions that load that inbox into the DuckDB warehouse."""
