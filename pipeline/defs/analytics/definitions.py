"""The analytics domain's definitions: the models of Settings.models_dir, their checks, the published copy."""

from __future__ import annotations

from dagster import Definitions

from pipeline.defs.analytics.assets import build_analytics
from pipeline.settings import Settings


def build_defs(settings: Settings) -> Definitions:
    analytics = build_analytics(settings)
    return Definitions(assets=analytics.assets, asset_checks=analytics.checks)
