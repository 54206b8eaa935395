#!/bin/sh
# deploy/install.sh SOURCE VENV: builds LessonSync's wheel from the checkout SOURCE and installs it, not editable,
# with the production extras (postgres, s3, dg) and the Kubernetes run launcher, into a new virtual environment
# VENV. The Dockerfile runs it, and so does tests/deploy/test_wheel_install.py: one list of commands for both.
# With DAGSTER_HOME set it also writes the PostgreSQL instance config there (docs/deploy.md, "A host that only
# runs the daemon or the webserver"). Needs uv on PATH (or UV=/path/to/uv) and Python 3.11 (PYTHON to change it).
set -eu

source_dir=$1
venv=$2
uv=${UV:-uv}
python=${PYTHON:-3.11}

# The wheel is built from a copy of exactly what it is made of: nothing of the checkout is written (build/,
# *.egg-info), and the Dockerfile COPYs the same list.
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
for path in pyproject.toml setup.py README.md pipeline dbt_like_sql; do
    cp -R "$source_dir/$path" "$build/"
done
"$uv" build --quiet --wheel --out-dir "$build/dist" "$build"

"$uv" venv --quiet --python "$python" "$venv"
# Bytecode compiled at install: every run worker, sensor evaluation and CLI call is a new process.
"$uv" pip install --quiet --compile-bytecode --python "$venv/bin/python" \
    "$(ls "$build"/dist/lessonsync-*.whl)[postgres,s3,dg]" 'dagster-k8s>=0.29,<0.30'

if [ -n "${DAGSTER_HOME:-}" ]; then
    "$venv/bin/python" -m pipeline.instance --postgres
fi
