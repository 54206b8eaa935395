"""The wheel's optional extras (pyproject.toml [project.optional-dependencies], docs/deploy.md "Installing"). The core
runs `lessonsync sync` from cron; what only an extra installs is imported inside the function that needs it, after
`require_extra`, so that a deployment without the extra gets one line naming what to install, not a traceback."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.settings import Settings

# extra -> the top-level modules it installs that pipeline/ or its users need (tests/test_dependencies.py checks
# that pipeline/ imports these only inside functions, and that pyproject.toml's extra declares them).
EXTRA_MODULES: dict[str, frozenset[str]] = {
    "ui": frozenset({"dagster_webserver", "dagster_dg_cli"}),
    "k8s": frozenset({"dagster_k8s"}),
    "postgres": frozenset({"dagster_postgres", "psycopg2"}),
    "s3": frozenset({"s3fs", "aiobotocore", "botocore"}),
    "dbt": frozenset({"dagster_dbt", "dbt"}),
}


class ExtraNotInstalled(ImportError):
    """An extra a setting or command needs is missing; the message names the setting and the install command."""


def install_command(extra: str) -> str:
    return f"pip install 'lessonsync[{extra}]'"


def require_extra(extra: str, needed_by: str, otherwise: str = "") -> None:
    """Nothing when every module of `extra` is importable; else ExtraNotInstalled naming `needed_by`, the install
    command and `otherwise` (the other way out, e.g. the setting to unset)."""
    missing = sorted(m for m in EXTRA_MODULES[extra] if importlib.util.find_spec(m) is None)
    if missing:
        raise ExtraNotInstalled(
            f"{needed_by} needs the extra {extra!r}, which is not installed (no module {missing[0]!r}): "
            f"{install_command(extra)}" + (f" ({otherwise})" if otherwise else "")
        )


def require_extras_of(settings: Settings) -> None:
    """Every extra the settings ask for is installed, checked before a sync starts: otherwise its run would fail
    part-way, where the extra's module is first imported, after a traceback."""
    if settings.models_runner == "dbt":
        require_extra("dbt", "LESSONSYNC_MODELS_RUNNER=dbt")
    if settings.lake_url is not None:
        require_extra("s3", "LESSONSYNC_LAKE_URL=s3://...")
    if settings.dagster_postgres_url is not None and settings.dagster_postgres_url.get_secret_value().strip():
        require_extra("postgres", "LESSONSYNC_DAGSTER_POSTGRES_URL (set)", otherwise="or unset it to keep SQLite")
    for variable, url in (
        ("LESSONSYNC_INBOX_URL", settings.inbox_url),
        ("LESSONSYNC_ICEBERG_CATALOG_URL", settings.iceberg_catalog_url),
    ):
        if url is not None and url.get_secret_value().startswith("postgres"):
            require_extra("postgres", f"{variable}=postgresql://...")
