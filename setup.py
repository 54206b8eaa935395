"""What the `lessonsync` wheel holds, beside pyproject.toml: the package `pipeline`, and the analyst models of
dbt_like_sql/ as package data at pipeline/analytics/dbt_like_sql/ (where pipeline.analytics.models looks first,
so an installed wheel finds them without a checkout). The simulator is its own distribution (simulator/)."""

from pathlib import Path

from setuptools import find_packages, setup

MODELS_ROOT = "dbt_like_sql"
MODELS_PACKAGE = "pipeline.analytics.dbt_like_sql"
# The models directory and each folder under it (staging, marts, any layer added later) as data-only packages.
MODEL_DIRS = [
    Path(MODELS_ROOT),
    *sorted(p for p in Path(MODELS_ROOT).rglob("*") if p.is_dir() and p.name != "__pycache__"),
]
MODEL_PACKAGES = {".".join([MODELS_PACKAGE, *d.relative_to(MODELS_ROOT).parts]): d.as_posix() for d in MODEL_DIRS}

setup(
    packages=[*find_packages(include=["pipeline", "pipeline.*"]), *MODEL_PACKAGES],
    package_dir=MODEL_PACKAGES,
    package_data={
        "pipeline": ["py.typed", "instance/dagster.yaml"],
        **{name: ["*.sql", "*.yml", "*.yaml", "*.md"] for name in MODEL_PACKAGES},
    },
)
