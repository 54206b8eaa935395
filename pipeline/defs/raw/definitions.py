"""The raw sync's definitions: the `lms_raw` multi-asset, its checks built from every stream's links."""

from __future__ import annotations

from collections.abc import Iterable

from dagster import Definitions

from pipeline.contract.streams import Link
from pipeline.defs.raw.assets import build_raw_sync
from pipeline.defs.raw.checks import check_rules
from pipeline.settings import Settings


def build_defs(settings: Settings, links: Iterable[Link]) -> Definitions:
    return Definitions(assets=[build_raw_sync(settings, check_rules(settings.orchestration, links))])
