"""The lake domain's definitions: the Iceberg mirror's two assets, when LESSONSYNC_TABLE_FORMAT=iceberg."""

from __future__ import annotations

from dagster import Definitions

from pipeline.contract.streams import stream_tables
from pipeline.defs.analytics.checks import PUBLISHED_KEY
from pipeline.defs.certificates.assets import CERTIFICATES_KEY, EVENTS_KEY
from pipeline.defs.common import lms_key
from pipeline.defs.lake.assets import build_lake_mirror
from pipeline.settings import Settings


def build_defs(settings: Settings) -> Definitions:
    if settings.iceberg_catalog is None:
        return Definitions()
    raw_keys = [*(lms_key(table) for table in stream_tables()), EVENTS_KEY, CERTIFICATES_KEY]
    return Definitions(assets=build_lake_mirror(raw_keys, PUBLISHED_KEY))
