"""The Parquet lake: parts and per-load manifests, where their bytes live, and the Iceberg mirror."""
