"""How stale the progress tables may get before their freshness check fails: the nightly run plus slack."""

import os
from datetime import timedelta

FRESHNESS_LOWER_BOUND = timedelta(hours=float(os.environ.get("LESSONSYNC_FRESHNESS_HOURS", "26")))
