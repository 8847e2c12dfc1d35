"""`local`: everything in this process, one unit after another (the single-process path)."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sage.api import Executor, WorkerPool
from sage.executors.executor_registry import EXECUTORS, ExecutorOptions


class LocalPool(WorkerPool):
    """One worker, built on first use, in this process."""

    size = 1

    def __init__(self, factory: Callable[[], Any]):
        self._factory, self._worker = factory, None

    @property
    def worker(self):
        if self._worker is None:
            self._worker = self._factory()
        return self._worker

    def map(self, units: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        for i, unit in enumerate(units):
            yield i, self.worker.run(unit)

    def call_all(self, name: str, *args) -> list:
        return [getattr(self.worker, name)(*args)]


@EXECUTORS.register("local")
class LocalExecutor(Executor):
    name = "local"
    distributes = False

    def __init__(self, options: ExecutorOptions | None = None):
        self.options = options or ExecutorOptions()
        self._pools: dict[str, LocalPool] = {}

    def pool(self, factory: Callable[[], Any], *, gpus: float | None = None, key: str | None = None) -> WorkerPool:
        if key is None:
            return LocalPool(factory)
        if key not in self._pools:
            self._pools[key] = LocalPool(factory)
        return self._pools[key]

    def release(self, key: str) -> None:
        self._pools.pop(key, None)

    def close(self) -> None:
        self._pools.clear()
