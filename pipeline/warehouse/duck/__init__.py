"""DuckDB itself: opening the file, table definitions and the catalog they are read back from, Arrow types."""
