"""`lessonsync` command line. Each subcommand lives in its own module, imported only when it runs,
so `lessonsync simulate` does not pay for importing Dagster."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# subcommand -> (module exposing `configure(parser)` and `run(args) -> int`, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("pipeline.simulator.cli", "serve the platform simulator over HTTP"),
    "receive": ("pipeline.webhooks.cli", "run the certificate webhook receiver"),
    "sync": ("pipeline.sync_cli", "run the sync assets in-process (for cron users)"),
    "recover": ("pipeline.recover_cli", "fail runs whose process died and free their pool slots"),
    "rebuild": ("pipeline.rebuild_cli", "rebuild the DuckDB tables from the Parquet lake alone"),
    "status": ("pipeline.state_cli", "per stream: cursor, last load, quarantine, freshness (from the lake)"),
    "reset": ("pipeline.state_cli", "move one stream's cursor back; the next sync re-reads from there"),
    "demo": ("pipeline.demo", "simulator + receiver + full and incremental sync, then a summary"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lessonsync", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    # Find the command name first, then let its module declare its own options (and answer its --help).
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in SUBCOMMANDS:
        parser.parse_args(argv)  # prints usage, or the error naming the unknown command, and exits
    module = importlib.import_module(SUBCOMMANDS[command][0])
    command_parser = argparse.ArgumentParser(prog=f"lessonsync {command}")
    command_parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
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
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
