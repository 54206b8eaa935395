"""The LessonSync code location as Dagster loads it: `workspace.yaml` and `dagster dev` load the module
attribute `defs`, built from the LESSONSYNC_* environment (and `.env`) when this module is imported. Code that
has its own settings calls pipeline/defs/code_location.py's `build_definitions(settings)` instead of importing
this module (which would build the definitions a second time)."""

from __future__ import annotations

from pipeline.defs.code_location import build_definitions
from pipeline.settings import load_settings

defs = build_definitions(load_settings())
