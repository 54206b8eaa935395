#!/bin/sh
# deploy/install.sh SOURCE VENV [EXTRAS]: installs LessonSync's wheel, not editable, with the extras EXTRAS into a new
# virtual environment VENV. SOURCE is the checkout (the wheel is built from it by deploy/build_wheel.sh) or a wheel
# built before. The Dockerfile runs it, and so do the wheel-install tests (tests/deploy/): one list of commands.
#
# EXTRAS (the third argument, else the EXTRAS variable): the wheel's extras, comma-separated (docs/deploy.md,
# "Installing"). Unset: postgres,s3,ui, production on hosts you run (the instance in PostgreSQL, the lake in S3, the
# Dagster UI). Empty: the core alone, enough for `lessonsync sync` from cron. k8s (the Kubernetes run launcher) only
# when named, as the Dockerfile does for the Helm chart's user-code image.
#
# With DAGSTER_HOME set it also writes the PostgreSQL instance config there (docs/deploy.md, "A host that only runs
# the daemon or the webserver"; needs the postgres extra). Needs uv on PATH (or UV=/path/to/uv) and Python 3.11
# (PYTHON to change it).
set -eu

source=$1
venv=$2
extras=${3-${EXTRAS-postgres,s3,ui}}
uv=${UV:-uv}
python=${PYTHON:-3.11}

case $source in
    *.whl) wheel=$source ;;
    *)
        dist=$(mktemp -d)
        trap 'rm -rf "$dist"' EXIT
        wheel=$(UV=$uv sh "$(dirname "$0")/build_wheel.sh" "$source" "$dist")
        ;;
esac

"$uv" venv --quiet --python "$python" "$venv"
# Bytecode compiled at install: every run worker, sensor evaluation and CLI call is a new process.
"$uv" pip install --quiet --compile-bytecode --python "$venv/bin/python" "$wheel${extras:+[$extras]}"

if [ -n "${DAGSTER_HOME:-}" ]; then
    "$venv/bin/python" -m pipeline.instance --postgres
fi
