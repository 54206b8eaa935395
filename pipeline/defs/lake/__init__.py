"""The lake domain: every raw table and published mart mirrored as an Iceberg table, in steps of their own."""
