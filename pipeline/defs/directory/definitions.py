"""The directory domain's definitions."""

from dagster import Definitions

from pipeline.defs.directory.assets import sync_groups


def build_defs() -> Definitions:
    return Definitions(assets=[sync_groups])
