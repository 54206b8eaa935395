"""The sessions domain's definitions."""

from dagster import Definitions

from pipeline.defs.sessions.assets import sync_lesson_sessions


def build_defs() -> Definitions:
    return Definitions(assets=[sync_lesson_sessions])
