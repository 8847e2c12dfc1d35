"""sage.scoring.malloc_tuning on glibc: with the mmap threshold fixed, a large block freed goes back to the OS."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from sage.scoring import malloc_tuning as heap


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc only")
def test_freed_large_blocks_leave_the_process():
    assert heap.fix_mmap_threshold() is True
    assert heap.fix_mmap_threshold() is True  # once per process, idempotent
    before = _rss()
    blocks = [np.ones(300_000 // 8 * (i + 1)) for i in range(64)]  # 0.3-19 MB each, about 620 MB
    assert _rss() - before > 500e6
    del blocks
    heap.release_free_heap()
    assert _rss() - before < 50e6
