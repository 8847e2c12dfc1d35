"""The executor base, its options and registry.

An executor runs *workers*: objects built once per worker process by a picklable factory (a
worker holds what is expensive to build: a loaded model, a generation backend) and then asked to
`run(unit)` many units of work. `map` yields (unit index, result) as units finish, in any order;
callers (the generation cache, the record stores) write each result as it arrives, so a run
killed at any point resumes from what was written. Units must be pure: running one twice (a
retry after a lost worker) gives the same result, and only the caller writes results, so a retry
never duplicates a record.

The executor bases (`Executor`, `WorkerPool`) live in `sage.api`: executors never import the
generation or editing code whose work they run (`sage.generation.factory` builds a sharded
backend over a pool, `sage.editing.sweep` hands editing units to one).
"""
from __future__ import annotations

from dataclasses import dataclass

from sage.api import Executor
from sage.errors import SageInputError
from sage.progress import progress_bar
from sage.registry import Registry

EXECUTORS: Registry[type] = Registry(
    "executor",
    lazy_modules={"local": "sage.executors.local", "ray": "sage.executors.ray_executor"},
)


@dataclass(frozen=True)
class ExecutorOptions:
    """Runtime options; each executor reads the ones it uses."""

    address: str | None = None  # ray: cluster address (default: RAY_ADDRESS, else a local cluster)
    workers: int | None = None  # ray: worker processes per pool (default: as many as resources allow)
    cpus_per_worker: float = 1.0  # ray: CPUs reserved per worker (also its torch threads)
    gpus_per_worker: float | None = None  # ray: default 1 (vLLM: tensor parallel size) when the cluster has GPUs
    max_retries: int = 3  # ray: restarts of a lost worker, and retries of the unit it was running

    def __post_init__(self):
        if self.workers is not None and self.workers < 1:
            raise SageInputError(f"--workers must be >= 1 (got {self.workers})")
        if self.cpus_per_worker <= 0:
            raise SageInputError(f"--cpus-per-worker must be > 0 (got {self.cpus_per_worker})")
        if self.gpus_per_worker is not None and self.gpus_per_worker < 0:
            raise SageInputError(f"--gpus-per-worker must be >= 0 (got {self.gpus_per_worker})")
        if self.max_retries < 0:
            raise SageInputError(f"max_retries must be >= 0 (got {self.max_retries})")


def make_executor(name: str | Executor | None = None, options: ExecutorOptions | None = None) -> Executor:
    """An executor by registry name (default `local`); an `Executor` instance is returned as is."""
    if isinstance(name, Executor):
        return name
    return EXECUTORS.get(name or "local")(options)


def run_units(executor: Executor, factory, units, *, key: str, desc: str, size, on_result,
              release: bool = True) -> None:
    """The one loop that hands units of work to `executor`'s workers (built by `factory`, kept
    under `key`) and gives each result to `on_result(index, result)` as it arrives: the caller
    writes it to its record store, so a killed run resumes from what was written. A progress bar
    counts `size(unit)` per finished unit; `release=False` keeps the workers for the caller's next
    call with the same key (a study's states share one loaded model)."""
    bar = progress_bar(total=sum(size(u) for u in units), desc=desc, unit="entry", leave=False)
    try:
        for i, result in executor.map(factory, units, key=key):
            on_result(i, result)
            bar.update(size(units[i]))
    finally:
        bar.close()
        if release:
            executor.release(key)
