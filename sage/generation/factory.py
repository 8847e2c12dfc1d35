"""The one way to build a generation backend: in this process, or sharded over an executor's
workers, wrapped in the driver's generation cache."""
from __future__ import annotations

import logging
from pathlib import Path

from sage.api import Executor, GenerationBackend
from sage.generation.backend_registry import BACKENDS, BackendOptions
from sage.generation.cache import CachedBackend, GenerationCache
from sage.generation.sharded import ShardedBackend

log = logging.getLogger(__name__)


def uncached_backend(spec, options: BackendOptions, executor: Executor | None = None) -> GenerationBackend:
    """`spec.backend` for `spec.model_id`: here, or over `executor`'s workers when it distributes
    work and the backend can be copied to workers (a network client or a function of this
    process stays here)."""
    cls = BACKENDS.get(spec.backend)
    if executor is None or not executor.distributes:
        return cls(spec.model_id, options)
    if not cls.distributable:
        log.info("%s backend runs on the driver; the %s executor leaves it there", spec.backend, executor.name)
        return cls(spec.model_id, options)
    return ShardedBackend(executor, spec, options)


def make_backend(
    spec,
    options: BackendOptions | None = None,
    *,
    cache_path: str | Path | None = None,
    executor: Executor | None = None,
) -> GenerationBackend:
    """`uncached_backend` wrapped in the driver's generation cache (default file: under the cache dir)."""
    return CachedBackend(uncached_backend(spec, options or BackendOptions(), executor), GenerationCache(cache_path))
