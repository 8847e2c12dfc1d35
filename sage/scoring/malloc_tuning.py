"""Keep a long streaming job's resident memory flat under glibc malloc.

glibc raises its mmap threshold each time a large block is freed, so after the first chunk the
large, short-lived arrays of the next ones (padded encoder batches, token embeddings, similarity
matrices) are carved out of the heap among long-lived small objects, and the heap's peak grows
chunk after chunk even though nothing is kept. Measured while scoring 300 questions x 10 answers
and RoTs with every metric in chunks of 25 questions: the per-chunk peak RSS rose from 1.05 to
1.31 GB; with a fixed 256 KiB threshold and the freed heap returned after each chunk it stayed
at 0.86-0.93 GB (benchmarks/RESULTS.md). Elsewhere (macOS, musl) these are no-ops.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

_M_MMAP_THRESHOLD = -3  # mallopt parameter (malloc.h)
MMAP_THRESHOLD = 256 * 1024
_state: dict[str, object] = {}


def _glibc():
    if "libc" not in _state:
        lib = None
        try:
            name = ctypes.util.find_library("c")
            candidate = ctypes.CDLL(name) if name else None
            if candidate is not None and hasattr(candidate, "mallopt") and hasattr(candidate, "malloc_trim"):
                lib = candidate
        except OSError:
            lib = None
        _state["libc"] = lib
    return _state["libc"]


def fix_mmap_threshold() -> bool:
    """Large blocks (>= 256 KiB) always mmapped, so they go back to the OS when freed (once per
    process; True where it took effect)."""
    if "threshold" not in _state:
        lib = _glibc()
        _state["threshold"] = bool(lib is not None and lib.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1)
        log.debug("glibc mmap threshold fixed at %d bytes: %s", MMAP_THRESHOLD, _state["threshold"])
    return bool(_state["threshold"])


def release_free_heap() -> None:
    """Return the heap's free pages to the OS (between chunks of a streaming job)."""
    lib = _glibc()
    if lib is not None:
        lib.malloc_trim(0)
