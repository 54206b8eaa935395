"""`python -m pipeline.instance`: create the Dagster home (DAGSTER_HOME, else <LESSONSYNC_DATA_DIR>/dagster_home)
with the shipped dagster.yaml if it has none, and print its path. `make dev` runs it before `dg dev`.

`python -m pipeline.instance --postgres`: write the deployed config into DAGSTER_HOME (the shipped file plus
PostgreSQL storage read from LESSONSYNC_DAGSTER_POSTGRES_URL, which need not be set yet), so that a host that
only runs the daemon or the webserver uses PostgreSQL from its first start. deploy/install.sh runs it."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pipeline.extras import ExtraNotInstalled
from pipeline.instance import ensure_dagster_home, write_deployed_config
from pipeline.settings import load_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.instance", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--postgres", action="store_true", help="write the PostgreSQL instance config into DAGSTER_HOME (deployments)"
    )
    args = parser.parse_args(argv)
    if not args.postgres:
        print(ensure_dagster_home(load_settings()))
        return 0
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        print("python -m pipeline.instance --postgres: set DAGSTER_HOME to the home to write", file=sys.stderr)
        return 2
    try:
        print(write_deployed_config(Path(home).resolve()))
    except ExtraNotInstalled as error:
        print(f"python -m pipeline.instance --postgres: {error}", file=sys.stderr)
        return 2
    return 0


sys.exit(main())
