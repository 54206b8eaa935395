"""The catalog domain's definitions."""

from dagster import Definitions

from pipeline.defs.catalog.assets import sync_categories, sync_lessons


def build_defs() -> Definitions:
    return Definitions(assets=[sync_categories, sync_lessons])
