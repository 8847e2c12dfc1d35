"""sage.scoring.malloc_tuning on glibc: with the mmap threshold fixed, a large block freed goes back to the OS.

Resident memory is per process, so the measure runs in a fresh interpreter: inside a test worker that has
run other tests, background threads left by them (an engine shutting down, a garbage-collected model) free
or touch memory between the two readings, and the difference no longer measures the blocks.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

_MEASURE = textwrap.dedent(
    """
    import json
    import numpy as np
    from sage.scoring import malloc_tuning as heap

    def rss():
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * 4096

    fixed = [heap.fix_mmap_threshold(), heap.fix_mmap_threshold()]  # once per process, idempotent
    before = rss()
    blocks = [np.ones(300_000 // 8 * (i + 1)) for i in range(64)]  # 0.3-19 MB each, about 620 MB
    allocated = sum(b.nbytes for b in blocks)
    held = rss() - before
    del blocks
    heap.release_free_heap()
    print(json.dumps({"fixed": fixed, "allocated": allocated, "held": held, "left": rss() - before}))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc only")
def test_freed_large_blocks_leave_the_process():
    out = subprocess.run([sys.executable, "-c", _MEASURE], capture_output=True, text=True, check=True)
    m = json.loads(out.stdout.strip().splitlines()[-1])
    assert m["fixed"] == [True, True]
    assert m["allocated"] > 600e6
    assert m["held"] > 0.8 * m["allocated"]  # the blocks were resident
    assert m["left"] < 50e6  # and went back to the OS once freed
