"""`python -m simulator`: the platform simulator on its own, without LessonSync (same options as
`lessonsync simulate`, see cli.py)."""

from __future__ import annotations

import argparse
import logging
import sys

from simulator import cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulator", description="Serve the platform simulator over HTTP.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    cli.configure(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return cli.run(args)


if __name__ == "__main__":
    sys.exit(main())
