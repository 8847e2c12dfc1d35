"""`ray`: workers are Ray actors on a cluster (`pip install 'sage-consistency[ray]'`).

Each pool is a set of actors built from one picklable factory (each holds a loaded model or a
generation backend, built once per actor) with `num_cpus`/`num_gpus` reserved per actor. Units go
to the actor with the fewest in flight (at most two each, so a slow actor never hoards work) and
results come back to the driver as they finish. A lost actor (a dead node, an out-of-memory kill,
`ray.kill`) is restarted and the units it held are retried (`max_retries`); since units are pure
and only the driver writes results, a retry never loses or duplicates a record.

Actors run the driver's own `sage` package (shipped with the job's `py_modules` when this executor
connects, else found through PYTHONPATH on a shared disk), so driver and workers never disagree on
code, and they see the driver's `SAGE_*` and Hugging Face environment variables
(cache directory, offline mode). Models must be present on every worker node (a shared file
system or the same Hugging Face cache), exactly as for a local run.
"""
from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sage.api import Executor, WorkerPool
from sage.errors import SageInputError
from sage.executors.executor_registry import EXECUTORS, ExecutorOptions

# The `sage` package directory, shipped to the workers (without importing `sage`, which sits above executors).
_PACKAGE_DIR = Path(__file__).resolve().parents[1]

log = logging.getLogger(__name__)

INSTALL_HINT = "the ray executor needs Ray: install it with `pip install 'sage-consistency[ray]'`"
_FORWARD_ENV = ("SAGE_", "HF_", "TRANSFORMERS_", "HUGGINGFACE_")
IN_FLIGHT = 2  # units queued per actor: one running, one ready to start


def _import_ray():
    try:
        import ray
    except ImportError:
        raise SageInputError(INSTALL_HINT) from None
    return ray


class _ActorBody:
    """What runs inside each actor: the worker built by the factory, one torch thread count."""

    def __init__(self, factory: Callable[[], Any], threads: int):
        import torch

        torch.set_num_threads(threads)
        self.worker = factory()

    def run(self, unit):
        return self.worker.run(unit)

    def call(self, name: str, *args):
        return getattr(self.worker, name)(*args)

    def pid(self) -> int:
        return os.getpid()


class _Pool(WorkerPool):
    def __init__(self, ray, actors: list, retries: int):
        self.ray, self.actors, self.retries = ray, actors, retries
        self.pids = self._started()
        self.size = len(actors)

    def _started(self) -> list[int]:
        """Waits until every worker is built (its model loaded), so start-up errors surface here."""
        from ray.exceptions import RayActorError

        try:
            return self.ray.get([a.pid.remote() for a in self.actors])
        except RayActorError as exc:
            self.kill()
            lines = [ln for ln in str(exc).splitlines() if "Error" in ln]
            raise SageInputError(f"a Ray worker could not start: {lines[-1].strip() if lines else exc}") from exc

    def call_all(self, name: str, *args) -> list:
        return self.ray.get([a.call.remote(name, *args) for a in self.actors])

    def map(self, units: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        ray = self.ray
        queue = deque(enumerate(units))
        load = [0] * len(self.actors)
        pending: dict = {}

        def submit(a: int) -> None:
            i, unit = queue.popleft()
            pending[self.actors[a].run.remote(unit)] = (i, a)
            load[a] += 1

        for _ in range(IN_FLIGHT):
            for a in range(len(self.actors)):
                if queue:
                    submit(a)
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            i, a = pending.pop(ref)
            load[a] -= 1
            result = self._get(ref)
            while queue and min(load) < IN_FLIGHT:
                submit(load.index(min(load)))
            yield i, result

    def _get(self, ref):
        """The unit's result; a worker's own one-line input error is raised as itself."""
        from ray.exceptions import RayActorError, RayTaskError

        try:
            return self.ray.get(ref)
        except RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, SageInputError):
                raise cause from None
            raise
        except RayActorError as exc:
            raise SageInputError(f"a Ray worker died more often than its {self.retries} restarts allow ({exc}); "
                                 "rerun the command to resume from the records written so far") from exc

    def kill(self) -> None:
        for a in self.actors:
            self.ray.kill(a, no_restart=True)
        self.actors = []


@EXECUTORS.register("ray")
class RayExecutor(Executor):
    name = "ray"
    distributes = True

    def __init__(self, options: ExecutorOptions | None = None):
        self.options = options or ExecutorOptions()
        self.ray = _import_ray()
        self._started = False
        if not self.ray.is_initialized():
            address = self.options.address or os.environ.get("RAY_ADDRESS")
            log.info("connecting to Ray at %s", address or "a new local cluster")
            self.ray.init(address=address, include_dashboard=False, configure_logging=False,
                          runtime_env={"py_modules": [str(_PACKAGE_DIR)]})
            self._started = True
        self._pools: dict[str, _Pool] = {}

    # ------------------------------------------------------------------ resources
    def _cluster_gpus(self) -> float:
        return float(self.ray.cluster_resources().get("GPU", 0))

    def _gpus(self, gpus: float | None) -> float:
        if self.options.gpus_per_worker is not None:
            return self.options.gpus_per_worker
        if gpus is not None:
            return gpus if self._cluster_gpus() > 0 else 0.0
        return 1.0 if self._cluster_gpus() > 0 else 0.0

    def workers(self, gpus: float | None = None) -> int:
        if self.options.workers:
            return self.options.workers
        gpus = self._gpus(gpus)
        if gpus > 0:
            return max(1, int(self._cluster_gpus() // gpus))
        cpus = float(self.ray.cluster_resources().get("CPU", 1))
        return max(1, int(cpus // self.options.cpus_per_worker))

    def _runtime_env(self, threads: int) -> dict:
        env = {k: v for k, v in os.environ.items() if k.startswith(_FORWARD_ENV)}
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false")
        # A cluster this executor joined got the package with the job (`py_modules`); one started by
        # the caller did not, so point its workers at the driver's copy (same machine or shared disk).
        root = str(_PACKAGE_DIR.parent)
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p])
        return {"env_vars": env}

    def pool(self, factory: Callable[[], Any], *, gpus: float | None = None, key: str | None = None) -> _Pool:
        if key is not None and key in self._pools:
            return self._pools[key]
        gpus = self._gpus(gpus)
        threads = max(1, int(self.options.cpus_per_worker))
        retries = self.options.max_retries
        cls = self.ray.remote(_ActorBody).options(
            num_cpus=self.options.cpus_per_worker, num_gpus=gpus, max_restarts=retries,
            max_task_retries=retries, runtime_env=self._runtime_env(threads))
        n = self.workers(gpus)
        log.info("starting %d Ray workers (%s CPU, %s GPU each)", n, self.options.cpus_per_worker, gpus)
        pool = _Pool(self.ray, [cls.remote(factory, threads) for _ in range(n)], retries)
        log.info("Ray workers ready (process ids %s)", pool.pids)
        self._pools[key if key is not None else f"anonymous-{id(pool)}"] = pool
        return pool

    def actors(self) -> list[tuple[Any, int]]:
        """(actor, process id at start) of every worker of this executor's pools (for inspection
        and fault-injection tests; a restarted worker has a new process id)."""
        return [(a, pid) for p in self._pools.values() for a, pid in zip(p.actors, p.pids)]

    # ------------------------------------------------------------------ work
    def release(self, key: str) -> None:
        """Stop a pool's actors (their resources go back to the cluster)."""
        pool = self._pools.get(key)
        if pool is not None:
            self.drop(pool)

    def drop(self, pool: _Pool) -> None:
        pool.kill()
        self._pools = {k: p for k, p in self._pools.items() if p is not pool}

    def close(self) -> None:
        for pool in list(self._pools.values()):
            self.drop(pool)
        if self._started:
            self.ray.shutdown()
            self._started = False
