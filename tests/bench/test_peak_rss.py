"""The benchmarks' peak RSS is the child's own: a big benchmark process (one holding the simulator) does not leak
into the figure, as it does into os.wait4's ru_maxrss over subprocess's vfork+exec."""

from __future__ import annotations

import sys

from bench.common import run_measured

ALLOCATE = "data = bytearray({mib} * 2**20)\nfor i in range(0, len(data), 4096): data[i] = 1\n"


def test_the_peak_is_the_childs_own_not_its_parents() -> None:
    parent = bytearray(400 * 2**20)
    for i in range(0, len(parent), 4096):
        parent[i] = 1
    small = run_measured([sys.executable, "-c", "import time; time.sleep(0.1)"])
    big = run_measured([sys.executable, "-c", ALLOCATE.format(mib=150) + "import time; time.sleep(0.1)"])
    assert small.returncode == big.returncode == 0
    assert small.peak_rss_mib < 100, small.peak_rss_mib  # a bare interpreter, not the 400 MiB of this process
    assert 150 <= big.peak_rss_mib < 300, big.peak_rss_mib
    del parent
