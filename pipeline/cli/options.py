"""Options several commands share, and the one way a command turns its options into `Settings`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from pipeline.settings import Settings

# Options whose value, when given, overrides the setting of the same name for this command only.
SETTING_OPTIONS = ("data_dir", "base_url")
DEFAULT_DATA_DIR_TEXT = "data"  # Settings.data_dir's default, as --help shows it
SHOWN_ARGUMENT_CHARS = 40  # of a wrong argument, in its error line


class CommandParser(argparse.ArgumentParser):
    """A command's parser (and its actions'): a wrong argument ends the command with one line naming it and
    status 2, not argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (`{self.prog} --help`)\n")


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` to `high` (a sequence number, a port, a seed), so that a value
    out of range is a usage error, not an overflow deep in SQLite or the socket layer."""

    def whole_number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # also a number of more digits than int() reads
            value = None
        if value is None or not low <= value <= high:
            shown = text if len(text) <= SHOWN_ARGUMENT_CHARS else text[: SHOWN_ARGUMENT_CHARS - 3] + "..."
            raise argparse.ArgumentTypeError(f"{shown!r} is not a whole number from {low} to {high}")
        return value

    return whole_number


def add_data_dir(parser: argparse.ArgumentParser, holds: str) -> None:
    # The default as text, not read from Settings: importing pydantic would slow every --help threefold
    # (tests/test_cli.py checks the two agree).
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"{holds} (default: LESSONSYNC_DATA_DIR, else {DEFAULT_DATA_DIR_TEXT})",
    )


def add_base_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base-url", default=None, metavar="URL", help="platform address without /v1 (default: LESSONSYNC_BASE_URL)"
    )


def settings_from(args: argparse.Namespace) -> Settings:
    """The settings of the environment and .env, with this command's options on top; exits naming the bad
    setting when one does not validate."""
    from pipeline.logs import register_settings_secrets
    from pipeline.settings import SettingsError, load_settings

    overrides = {name: value for name in SETTING_OPTIONS if (value := getattr(args, name, None)) is not None}
    try:
        settings = load_settings(**overrides)
    except SettingsError as error:
        raise SystemExit(f"lessonsync {args.command}: {error}") from None
    register_settings_secrets(settings)  # no log line of the command carries them
    return settings
