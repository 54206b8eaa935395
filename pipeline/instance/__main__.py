"""`python -m pipeline.instance`: create the Dagster home (DAGSTER_HOME, else <LESSONSYNC_DATA_DIR>/dagster_home)
with the shipped dagster.yaml if it has none, and print its path. `make dev` runs it before `dagster dev`."""

from pipeline.instance import ensure_dagster_home
from pipeline.settings import load_settings

print(ensure_dagster_home(load_settings()))
