"""One load from its first batch to its commit: batches checked and written, child links, the early insert."""
