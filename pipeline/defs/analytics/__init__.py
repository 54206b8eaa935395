"""The analytics domain: the SQL models of dbt_like_sql/ as assets, their tests as checks, the published copy."""
