"""Decoding one page: validate the whole page in Rust first; only if that fails, record by record, so a
record that breaks its schema is quarantined (with endpoint, page, field, message and its raw JSON) and
the rest of the page still loads. Records whose key fields are missing cannot be upserted and are
quarantined too. A body that is not complete JSON raises TruncatedBody (the transport retries it).
Records are validated dicts with API names (validation.py), ready for Arrow (builders.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from pipeline.source.catalog import TABLES
from pipeline.source.errors import PlatformResponseError, TruncatedBody
from pipeline.source.quarantine import QuarantineRow, quarantine_row
from pipeline.source.streams import StreamSpec
from pipeline.source.validation import RecordValidator

log = logging.getLogger("lessonsync.source")


@dataclass(frozen=True)
class PageLocation:
    stream: str
    endpoint: str  # the path as requested, percent-encoded
    page: int  # pageNumber sent; 0 for unpaginated operations
    params: Mapping[str, str]

    def __str__(self) -> str:
        return f"GET {self.endpoint} page {self.page}"


@dataclass
class DecodedPage:
    """A page as validated dicts (API names), before it becomes Arrow batches (requests.arrow_page)."""

    location: PageLocation
    served: int  # records in the page as served, valid or not (drives short-page and coverage rules)
    records: list[Any]  # valid, keyed records: validated dicts with API names
    quarantined: list[QuarantineRow]
    with_extras: bool = False  # False: no record has an unknown field (no extras scan needed)


class PageDecoder:
    """Turns page bodies of one stream into valid records plus quarantine rows.

    Fast path: the whole page validated in Rust, unknown fields forbidden. If only unknown fields broke
    it, the page is validated again keeping them. Otherwise each record is validated alone: the bad
    ones are quarantined, the rest load.
    """

    def __init__(self, stream: StreamSpec) -> None:
        self._stream = stream
        self._validator = RecordValidator(stream.model)
        fields = stream.model.model_fields
        self._key_fields = [fields[name].alias or name for name in TABLES[stream.table].key
                            if name in fields and not fields[name].is_required()]

    def decode(self, body: bytes, where: PageLocation) -> DecodedPage:
        try:
            return self._keyed(DecodedPage(where, 0, self._validator.page_without_extras.validate_json(body), []))
        except ValidationError as exc:
            errors = exc.errors()
        if any(e["type"] == "json_invalid" for e in errors):
            raise TruncatedBody(errors[0]["msg"])
        if any(len(e["loc"]) == 0 for e in errors):
            raise PlatformResponseError(f"{where} ({self._stream.name}): expected a JSON array of "
                                        f"{self._stream.model.__name__} records: {errors[0]['msg']}")
        if all(e["type"] == "extra_forbidden" for e in errors):
            try:
                records = self._validator.page_with_extras.validate_json(body)
                return self._keyed(DecodedPage(where, 0, records, [], with_extras=True))
            except ValidationError as exc:  # unknown fields inside a closed object: find the records
                errors = exc.errors()
        return self._decode_slowly(body, errors, where)

    def _decode_slowly(self, body: bytes, errors: list[Any], where: PageLocation) -> DecodedPage:
        raw = orjson.loads(body)
        by_index: dict[int, list[Mapping[str, Any]]] = {}
        for error in errors:
            if error["type"] != "extra_forbidden":  # unknown fields are kept, not errors
                by_index.setdefault(int(error["loc"][0]), []).append({**error, "loc": error["loc"][1:]})
        page = DecodedPage(where, len(raw), [], [], with_extras=True)
        positions: list[int] = []  # where each kept record sat in the page
        for index, item in enumerate(raw):
            if index in by_index:
                self._quarantine(page, index, item, by_index[index])
                continue
            try:
                page.records.append(self._validator.record.validate_python(item))
                positions.append(index)
            except ValidationError as exc:  # e.g. an unknown field inside an object the spec closes
                self._quarantine(page, index, item, exc.errors())
        return self._keyed(page, positions)

    def _keyed(self, page: DecodedPage, positions: list[int] | None = None) -> DecodedPage:
        """Records missing a key field cannot be upserted: quarantined (only optional key fields can be)."""
        page.served = page.served or len(page.records)
        keys = self._key_fields
        if all(None not in [r.get(k) for r in page.records] for k in keys):
            return page
        kept = []
        for number, record in enumerate(page.records):
            missing = [k for k in keys if record.get(k) is None]
            if not missing:
                kept.append(record)
                continue
            message = (f"missing, and table {self._stream.table} cannot key a record without it "
                       f"(key: {', '.join(TABLES[self._stream.table].key)})")
            index = number if positions is None else positions[number]
            self._quarantine(page, index, record, [{"loc": (name,), "msg": message} for name in missing])
        page.records = kept
        return page

    def _quarantine(self, page: DecodedPage, index: int, item: Any, errors: list[Mapping[str, Any]]) -> None:
        row = quarantine_row(page.location, index, item, errors)
        page.quarantined.append(row)
        log.warning("quarantined record %d of %s (%s): %s", index, page.location, page.location.stream, row.message)
