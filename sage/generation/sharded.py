"""A generation backend spread over an executor's worker pool (`--executor ray`).

Each worker holds the backend a `ModelSpec` names, built once by a picklable factory; requests are
cut into shards that go to the workers as units. The executor knows nothing of generation: it is
handed the factory and the shards (`sage.api.Executor.pool`).
"""
from __future__ import annotations

import functools
import logging
import math
from typing import Iterator, Sequence

from sage.api import Executor, Generation, GenerationRequest, StreamingBackend
from sage.errors import SageInputError
from sage.generation.backend_registry import BACKENDS, BackendOptions

log = logging.getLogger(__name__)


class BackendWorker:
    """One generation backend inside a worker; `run(requests)` generates a shard."""

    def __init__(self, backend: str, model_id: str, options: BackendOptions):
        self.backend = BACKENDS.get(backend)(model_id, options)

    def run(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return self.backend.generate(requests)

    def identity(self) -> dict:
        return self.backend.identity()

    def close(self) -> None:
        self.backend.close()


class ShardedBackend(StreamingBackend):
    """A pool of workers, each holding the backend `spec` names; requests are sharded over them.

    Its identity is the workers' backend identity (computed on a worker: the weights it fingerprints
    are the ones it loaded), so the driver's cache keys are exactly a local run's."""

    def __init__(self, executor: Executor, spec, options: BackendOptions):
        self.executor, self.spec, self.options = executor, spec, options
        self.name = spec.backend
        self._key = f"generation:{spec.backend}:{spec.model_id}:{id(self)}"
        factory = functools.partial(BackendWorker, spec.backend, spec.model_id, options)
        self._pool = executor.pool(factory, gpus=float(options.tensor_parallel_size), key=self._key)
        identities = self._pool.call_all("identity")
        if any(i != identities[0] for i in identities):
            raise SageInputError(f"workers hold different copies of {spec.model_id!r} (their weight "
                                 "fingerprints differ); give every node the same model files")
        self._identity = identities[0]
        self.parallelism = self._pool.size

    @property
    def model_id(self) -> str:
        return self.spec.model_id

    def identity(self) -> dict:
        return self._identity

    def generate_iter(self, requests: Sequence[GenerationRequest]) -> Iterator[tuple[int, Generation]]:
        # Two shards per worker at least, each a few batches long, so every worker stays busy and a
        # transformers worker can refill its batch from its own shard.
        bs = max(1, self.options.batch_size)
        size = min(max(bs, math.ceil(len(requests) / (2 * self.parallelism))), 8 * bs)
        starts = list(range(0, len(requests), size))
        shards = [list(requests[s : s + size]) for s in starts]
        for j, outs in self._pool.map(shards):
            for k, g in enumerate(outs):
                yield starts[j] + k, g

    def close(self) -> None:
        try:  # each worker's backend frees what it holds (a vLLM engine stops its own processes)
            self._pool.call_all("close")
        except Exception as exc:  # a worker already gone: releasing the pool below is all that is left
            log.debug("closing the workers' backends: %s", exc)
        self.executor.release(self._key)
