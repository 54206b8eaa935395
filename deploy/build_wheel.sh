#!/bin/sh
# deploy/build_wheel.sh SOURCE OUT_DIR: builds LessonSync's wheel from the checkout SOURCE into OUT_DIR and prints its
# path. It builds from a copy of exactly what the wheel is made of, so nothing of the checkout is written (build/,
# *.egg-info), and the Dockerfile COPYs the same list. deploy/install.sh runs it; so do the wheel-install tests
# (tests/deploy/), once per session. Needs uv on PATH (or UV=/path/to/uv).
set -eu

source_dir=$1
out_dir=$2
uv=${UV:-uv}

build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
for path in pyproject.toml setup.py README.md pipeline dbt_like_sql; do
    cp -R "$source_dir/$path" "$build/"
done
mkdir -p "$out_dir"
"$uv" build --quiet --wheel --out-dir "$build/dist" "$build"
wheel=$(ls "$build"/dist/lessonsync-*.whl)
cp "$wheel" "$out_dir/"
echo "$out_dir/$(basename "$wheel")"
