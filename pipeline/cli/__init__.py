"""LessonSync keeps a DuckDB warehouse and a Parquet lake in step with a learning platform's developer API:
active lessons and answers by cursor, the directory, catalogue and sessions as snapshots, certificates from
the platform's webhooks, and analytics marts built from them. Dagster runs it on a schedule (`make dev`);
these commands run it without the daemon and look after it."""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import sys

from pipeline.cli.options import CommandParser
from pipeline.extras import ExtraNotInstalled
from pipeline.simulator_extra import SimulatorNotInstalled, simulator_extra

EPILOG = """\
Settings come from LESSONSYNC_* environment variables or a .env file (docs/settings.md); the --data-dir
and --base-url options override them for one command. `lessonsync COMMAND --help` explains a command."""

# command -> (module exposing `configure(parser)` and `run(args) -> int`, what it does, in one line). A module
# is imported only when its command runs, so `lessonsync --help` and the light commands start at once.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "sync": ("pipeline.cli.sync", "load what changed on the platform, then build the marts"),
    "status": ("pipeline.cli.status", "show each stream's cursor, last load, quarantine, freshness"),
    "reset": ("pipeline.cli.reset", "move a cursor back; the next sync re-reads from there"),
    "rebuild": ("pipeline.cli.rebuild", "rebuild the warehouse from the lake and the inbox"),
    "tables": ("pipeline.cli.tables", "show or maintain the lake's Iceberg tables"),
    "recover": ("pipeline.cli.recover", "fail runs whose process died, free their slots"),
    "receive": ("pipeline.cli.receive", "receive certificate webhooks into the inbox"),
    "inbox": ("pipeline.cli.inbox", "list, replay or discard quarantined inbox events"),
    "simulate": ("simulator.cli", "serve a simulated platform, to try LessonSync on"),
    "demo": ("pipeline.cli.demo", "sync a simulated platform twice and verify the warehouse"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lessonsync", description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for name, (_module, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    # Find the command name first, then let its module declare its own options (and answer its --help).
    command = next((a for a in argv if not a.startswith("-")), None)
    if command is None or command not in SUBCOMMANDS:
        parser.parse_args(argv)  # prints usage, or the error naming the unknown command, and exits
        parser.error("a command is required")
    module_name, help_text = SUBCOMMANDS[command]
    try:  # `simulate` and `demo` need the simulator extra: without it, say what to install
        with simulator_extra(f"lessonsync {command}"):
            module = importlib.import_module(module_name)
    except SimulatorNotInstalled as exc:
        parser.exit(2, f"{exc}\n")
    # The one-line help as a sentence, unless the command's module gives a longer description in `configure`.
    command_parser = CommandParser(
        prog=f"lessonsync {command}",
        description=_sentence(help_text),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command_parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    command_parser.set_defaults(command=command)
    module.configure(command_parser)
    rest = list(argv)
    rest.remove(command)
    args = command_parser.parse_args(rest)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:  # per-request and migration lines are noise; lessonsync.source logs progress
        for noisy in ("httpx", "alembic"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    try:  # a command may import the simulator only when it runs (the demo does, to keep --help light)
        with simulator_extra(f"lessonsync {command}"):
            return int(module.run(args) or 0)
    except SimulatorNotInstalled as exc:
        parser.exit(2, f"{exc}\n")
    except ExtraNotInstalled as exc:  # a setting asks for an extra that is not installed
        parser.exit(2, f"lessonsync {command}: {exc}\n")
    finally:
        # The command is done: the interpreter's final garbage collection would walk every object Dagster and the
        # run left (seconds, after the verdict is printed); frozen objects are left to the process's end.
        gc.freeze()


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."
