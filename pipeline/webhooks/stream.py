"""The certificate inbox as warehouse streams: which tables it writes and where its position lives."""

from __future__ import annotations

import re

from pipeline.contract.tables import CERTIFICATE_EVENTS, CERTIFICATES
from pipeline.warehouse import Warehouse

SPECS = (CERTIFICATE_EVENTS, CERTIFICATES)
STREAM_PREFIX = "certificate_inbox_"
_INBOX_ID = re.compile(r"^[0-9a-f]{1,64}$")  # the receiver gives each inbox uuid4().hex


def inbox_stream(inbox_id: str) -> str:
    """The warehouse stream of one inbox (its row in lms._sync_state, its loads in lms._load_runs). A recreated
    inbox restarts its sequence, so each inbox is a stream of its own."""
    if not _INBOX_ID.match(inbox_id):
        raise ValueError(
            f"inbox id {inbox_id!r} (inbox_meta of the inbox file) is not the lower-case hex id the "
            "receiver writes; restore the inbox file or let the receiver create a new one"
        )
    return STREAM_PREFIX + inbox_id


def high_water_mark(warehouse: Warehouse, inbox_id: str) -> int:
    """The inbox sequence up to which the warehouse holds every event of that inbox (0: none yet)."""
    return warehouse.position(inbox_stream(inbox_id)) or 0
