"""`local`: everything in this process, one unit after another (today's single-process path)."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sage.executors.base import EXECUTORS, Executor


@EXECUTORS.register("local")
class LocalExecutor(Executor):
    name = "local"

    def __init__(self, options=None):
        super().__init__(options)
        self._workers: dict[str, Any] = {}

    def map(self, factory: Callable[[], Any], units: Sequence[Any], *, gpus: float | None = None,
            key: str | None = None) -> Iterator[tuple[int, Any]]:
        worker = self._workers.get(key) if key is not None else None
        if worker is None:
            worker = factory()
            if key is not None:
                self._workers[key] = worker
        for i, unit in enumerate(units):
            yield i, worker.run(unit)

    def generation_backend(self, spec, options):
        from sage.generation.base import BACKENDS

        return BACKENDS.get(spec.backend)(spec.model_id, options)

    def release(self, key: str) -> None:
        self._workers.pop(key, None)

    def close(self) -> None:
        self._workers.clear()
