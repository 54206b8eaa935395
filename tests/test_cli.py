"""The `lessonsync` command line: its --help describes the product and every command in a line, without
importing Dagster, DuckDB or pandas; every command answers --help; options become Settings overrides (the
data directory and platform address reach the run, nothing lands in the default data directory); a bad
setting stops a command with a message naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from pipeline.cli import SUBCOMMANDS, main
from pipeline.cli.options import DEFAULT_DATA_DIR_TEXT
from pipeline.settings import Settings
from pipeline.stack import local_stack
from pipeline.verify import compare_table

LESSONSYNC = str(Path(sys.executable).with_name("lessonsync"))
HEAVY = ("dagster", "duckdb", "pandas", "pyarrow", "uvicorn", "pydantic")
LIGHT_HELP = [c for c in SUBCOMMANDS if c != "simulate"]  # the simulator's command is the simulator's own


def clean_env() -> dict[str, str]:
    """The environment without any LessonSync or Dagster setting (and no .env: the cwd is tmp_path)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("LESSONSYNC_", "DAGSTER_HOME"))}


def test_help_describes_the_product_and_each_command_in_one_line(tmp_path):
    result = subprocess.run([LESSONSYNC, "--help"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "DuckDB warehouse" in result.stdout and "LESSONSYNC_" in result.stdout
    for command, (_module, line) in SUBCOMMANDS.items():
        assert f"    {command:12} {line}\n" in result.stdout, f"{command} not listed on one line:\n{result.stdout}"
    assert "pipeline." not in result.stdout and "import" not in result.stdout


def test_help_of_every_command_imports_neither_dagster_nor_duckdb(tmp_path):
    script = (
        "import sys\nfrom pipeline.cli import main\n"
        f"for command in {LIGHT_HELP!r}:\n"
        "    try:\n        main([command, '--help'])\n    except SystemExit as exit:\n"
        "        assert exit.code == 0, (command, exit.code)\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout[-2000:]


@pytest.mark.parametrize("command", list(SUBCOMMANDS))
def test_every_command_says_what_it_does(command, capsys):
    with pytest.raises(SystemExit) as exit:
        main([command, "--help"])
    assert exit.value.code == 0
    usage, _, rest = capsys.readouterr().out.partition("\n\n")
    assert usage.startswith(f"usage: lessonsync {command}")
    description = rest.split("\n\n")[0]
    assert len(description) > 30 and not description.startswith("options:"), rest


def test_the_data_dir_default_shown_in_help_is_the_settings_default():
    assert Path(DEFAULT_DATA_DIR_TEXT) == Settings.model_fields["data_dir"].default


def test_a_bad_setting_stops_a_command_naming_it(tmp_path):
    env = {**clean_env(), "LESSONSYNC_LAKE_URL": "http://not-a-bucket"}
    result = subprocess.run(
        [LESSONSYNC, "reset", "active_lessons"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 1
    assert "lessonsync reset: invalid settings" in result.stderr and "LESSONSYNC_LAKE_URL" in result.stderr
    assert "Traceback" not in result.stderr
    # `status` answers monitoring: UNKNOWN (exit 3), the same line as its verdict
    result = subprocess.run([LESSONSYNC, "status"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 3 and "Traceback" not in result.stderr
    assert (
        result.stdout.startswith("UNKNOWN: lessonsync status: invalid settings")
        and "LESSONSYNC_LAKE_URL" in result.stdout
    )


@pytest.mark.slow
def test_sync_options_reach_the_run_and_nothing_lands_in_the_default_data_dir(tmp_path):
    work = tmp_path / "cwd"  # where the default data directory would be
    work.mkdir()
    with local_stack(tmp_path / "stack", scale="tiny") as stack:
        target = tmp_path / "elsewhere"
        sync = subprocess.run(
            [
                LESSONSYNC,
                "sync",
                "--select",
                "key:lms/categories",
                "--data-dir",
                str(target),
                "--base-url",
                stack.sim.base_url,
            ],
            env=clean_env(),
            cwd=work,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert sync.returncode == 0, (sync.stdout + sync.stderr)[-3000:]
        assert "lms/categories" in sync.stdout and "sync succeeded" in sync.stdout
        with duckdb.connect(str(target / "warehouse.duckdb"), read_only=True) as conn:
            diff = compare_table(conn, stack.sim, "categories")
        assert diff.equal and diff.actual_rows > 0, diff.summary()
    assert (target / "dagster_home" / "dagster.yaml").exists()  # the Dagster home of that data directory
    assert list(work.iterdir()) == []


def test_recover_creates_the_dagster_home_of_its_data_dir(tmp_path):
    result = subprocess.run(
        [LESSONSYNC, "recover", "--data-dir", str(tmp_path / "d")],
        env=clean_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("nothing to recover")
    assert (tmp_path / "d" / "dagster_home" / "dagster.yaml").exists()
