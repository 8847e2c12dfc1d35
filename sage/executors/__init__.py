"""Where the work runs: in this process (`local`) or on a Ray cluster (`ray`).

One small base (`Executor`) and one registry (`EXECUTORS`), chosen by name with `--executor`.
The driver always keeps the generation cache and the record stores; executors only compute.
"""
from sage.executors.executor_registry import EXECUTORS, Executor, ExecutorOptions, make_executor, run_units

__all__ = ["EXECUTORS", "Executor", "ExecutorOptions", "make_executor", "run_units"]
