"""Wall time spent inside a torch module's forward passes, for the run summary's timings."""
from __future__ import annotations

import time


class ForwardClock:
    """Accumulates wall time spent inside a torch module's forward passes (via hooks)."""

    def __init__(self):
        self.seconds = 0.0
        self._start: list[float] = []

    def attach(self, module) -> None:
        module.register_forward_pre_hook(lambda *_: self._start.append(time.perf_counter()))
        module.register_forward_hook(lambda *_: self._stop())

    def _stop(self) -> None:
        self.seconds += time.perf_counter() - self._start.pop()
