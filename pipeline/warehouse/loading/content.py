"""What a snapshot table's rows in one load are, as one digest: equal digests mean the two loads wrote the same
batches (a multiset: the order they arrived in does not count, as a snapshot's pages come back in any order when
fetched concurrently). merge/repeats.py compares it with the last load's to skip the compare of every row.

A digest that differs proves nothing (the same rows cut into other batches give another one), so the only cost
of a false difference is the ordinary apply. Equal digests are the claim that matters: SHA-256 over each batch's
Arrow IPC bytes and the table's schema, so equal digests need equal columns, types and values. SHA-256, not BLAKE2b:
CPUs with SHA extensions (x86 since ~2017, ARMv8) hash 2-3x faster with it, and a quiet run digests every snapshot
page (~50 MB at scale large)."""

from __future__ import annotations

import hashlib

import pyarrow as pa

DIGEST_BYTES = 16


class ContentDigest:
    """The digests of the batches written so far to one table of one load, combined on demand."""

    def __init__(self, schema: pa.Schema) -> None:
        self._schema = schema
        self._batches: list[bytes] = []  # one 16-byte digest a batch: a snapshot's few thousand pages at most

    def add(self, batch: pa.RecordBatch) -> None:
        self._batches.append(hashlib.sha256(batch.serialize()).digest()[:DIGEST_BYTES])

    def hexdigest(self) -> str:
        combined = hashlib.sha256(self._schema.serialize())
        for batch in sorted(self._batches):
            combined.update(batch)
        return combined.hexdigest()[: 2 * DIGEST_BYTES]
