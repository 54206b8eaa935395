"""Look after the certificate inbox's quarantine: the stored events the loader could not turn into rows
(a date-time out of range, a payload the model no longer accepts...). The other events load without them.

    lessonsync inbox list [--all]     quarantined events: sequence, certificate, field, error
    lessonsync inbox replay SEQ       load one again once its cause is fixed (e.g. after an upgrade)
    lessonsync inbox discard SEQ      drop one for good (its row stays in the inbox, marked discarded)

`replay` writes to the warehouse: it waits for a sync holding it, like any writer."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from pipeline.cli.options import add_data_dir, bounded_int, settings_from

if TYPE_CHECKING:
    from pipeline.settings import Settings
    from pipeline.webhooks import InboxBackend

MAX_SEQUENCE = 2**63 - 1  # inbox sequences are SQLite INTEGERs or PostgreSQL bigints


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="quarantined events")
    listing.add_argument("--all", action="store_true", help="also the replayed and discarded ones")
    add_data_dir(listing, "where the inbox is")
    for name, help_text in (("replay", "load a quarantined event again"), ("discard", "drop a quarantined event")):
        action = actions.add_parser(name, help=help_text)
        action.add_argument(
            "sequence",
            type=bounded_int(1, MAX_SEQUENCE),
            metavar="SEQ",
            help="its inbox sequence (`lessonsync inbox list`)",
        )
        add_data_dir(action, "where the warehouse, lake and inbox are")


def inbox_quarantine_line(settings: Settings) -> str | None:
    """What `lessonsync status` says about the inbox's quarantine; None when nothing waits there."""
    from pipeline.webhooks import count_dead_letters

    waiting = count_dead_letters(settings_inbox(settings))
    if not waiting:
        return None
    return f"certificate inbox: {waiting} event(s) quarantined, not loaded (`lessonsync inbox list`)"


def settings_inbox(settings: Settings) -> InboxBackend:
    """The inbox of these settings: PostgreSQL with LESSONSYNC_INBOX_URL, else the SQLite file."""
    from pipeline.webhooks import open_inbox

    url = settings.inbox_url
    return open_inbox(url.get_secret_value() if url is not None else settings.inbox_path)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    inbox = settings_inbox(settings)
    if args.action == "list":
        return _list(inbox, show_all=args.all)
    if args.action == "discard":
        return _discard(inbox, args.sequence)
    return _replay(settings, inbox, args.sequence)


def _list(inbox: InboxBackend, *, show_all: bool) -> int:
    from pipeline.webhooks import list_dead_letters

    letters = list_dead_letters(inbox, status=None if show_all else "quarantined")
    if not letters:
        print(f"no {'dead letter' if show_all else 'quarantined event'} in {inbox.location}")
        return 0
    print(f"{'sequence':>8}  {'status':11} {'quarantined at':25} {'tries':>5}  {'certificate':24} field: error")
    for d in letters:
        print(
            f"{d.sequence:>8}  {d.status:11} {d.quarantined_at.isoformat(timespec='seconds'):25} {d.attempts:>5}  "
            f"{d.certificate_id[:24]:24} {d.field}: {d.error}"
        )
    return 0


def _discard(inbox: InboxBackend, sequence: int) -> int:
    from pipeline.webhooks import get_dead_letter, resolve_dead_letter

    letter = get_dead_letter(inbox, sequence)
    if letter is None or letter.status != "quarantined":
        state = "no quarantined event" if letter is None else f"already {letter.status}"
        print(f"lessonsync inbox discard: inbox sequence {sequence}: {state}", file=sys.stderr)
        return 1
    resolve_dead_letter(inbox, sequence, "discarded")
    print(f"discarded inbox sequence {sequence} (certificate {letter.certificate_id!r}); it will not be loaded")
    return 0


def _replay(settings: Settings, inbox: InboxBackend, sequence: int) -> int:
    from pipeline.warehouse import Warehouse
    from pipeline.webhooks import replay_dead_letter

    try:
        outcome = replay_dead_letter(Warehouse.from_settings(settings), inbox, sequence)
    except ValueError as exc:
        print(f"lessonsync inbox replay: {exc}", file=sys.stderr)
        return 1
    print(f"replayed {outcome}")
    return 0
