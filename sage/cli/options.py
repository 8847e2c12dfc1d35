"""Option parsing helpers shared by subcommands."""
from __future__ import annotations

import os
import sys

import click

from sage.cli.presets import PRESETS
from sage.executors import EXECUTORS, ExecutorOptions
from sage.metrics.graph_measures import GraphOptions


def csv_list(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    if not items:
        raise click.BadParameter("expected a comma-separated list")
    return items


DTYPE_CHOICES = ("auto", "bfloat16", "float16", "float32")


def precision_options(f):
    """--dtype and --device-map for commands that load a causal LM."""
    f = click.option("--device-map", default=None,
                     help="'auto' spreads a model too large for one GPU over the available GPUs (accelerate).")(f)
    f = click.option("--dtype", type=click.Choice(DTYPE_CHOICES), default="auto", show_default=True,
                     help="Model weights' dtype: auto = bfloat16 on CUDA, float32 on CPU.")(f)
    return f


def preset_option(*, help_suffix: str = ""):
    """`--preset NAME` (sage.cli.presets): the preset's values become the defaults of the other options.

    The option is eager, so its callback runs before the other options are read and its values
    land in `ctx.default_map`; click uses an option's value from the command line first, then the
    default map, then the declared default, so explicit options override the preset.
    """
    def callback(ctx: click.Context, param: click.Parameter, value: str | None):
        if value is None:
            return None

        preset = PRESETS.get(value)  # unknown name: one line listing the presets, exit 2
        ctx.default_map = {**(ctx.default_map or {}), **preset.values}
        return value

    def names() -> str:
        return ", ".join(PRESETS.names())

    return click.option("--preset", default=None, is_eager=True, callback=callback,
                        help=f"Named settings ({names()}); options given explicitly override them.{help_suffix}")


def hide_progress() -> None:
    """No progress bars from sage, transformers or huggingface_hub in this process and the ones it
    starts (Ray workers, servers). tqdm reads TQDM_DISABLE when it is first imported, so this runs
    while the command line is parsed, before any command imports it."""

    os.environ["TQDM_DISABLE"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if "transformers" in sys.modules:  # imported already (the Python API): switch its bars off too
        sys.modules["transformers"].utils.logging.disable_progress_bar()


def quiet_model_loading() -> None:
    """Hide transformers' per-model "Loading weights" bars unless -v: they are not the command's
    progress. transformers ties its bars to huggingface_hub's switch, so the hub's download bars
    are switched back on (unless --no-progress hid every bar)."""

    if int(os.environ.get("SAGE_VERBOSE", "0") or 0) > 0:
        return
    import huggingface_hub.utils
    import transformers.utils.logging  # torch-free at import, but a second of start-up: only for model commands

    transformers.utils.logging.disable_progress_bar()
    if os.environ.get("TQDM_DISABLE") != "1":
        huggingface_hub.utils.enable_progress_bars()


def progress_option(f):
    """--no-progress: hide every progress bar (the command still gets the flag's value)."""
    def callback(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
        if value:
            hide_progress()
        return value

    return click.option("--no-progress", is_flag=True, is_eager=True, callback=callback,
                        help="Hide progress bars (sage's, and the libraries' such as transformers' weight loading).")(f)


def server_options(f):
    """--concurrency, --max-retries and --timeout of OpenAI-compatible endpoints, shared by every
    command that can generate through one (score, generate)."""
    opts = [
        click.option("--concurrency", default=8, show_default=True, type=click.IntRange(min=1),
                     help="openai: requests in flight."),
        click.option("--max-retries", default=5, show_default=True, type=click.IntRange(min=0),
                     help="openai: retries of a request after 429, 5xx, a timeout or a dropped connection."),
        click.option("--timeout", default=60.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
                     help="openai: seconds per request."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


_ENGINE_KEYS = ("tensor_parallel_size", "enforce_eager", "kv_cache_gib")


def engine_options(f):
    """vLLM engine settings (`BackendOptions`), shared by every command that can generate with vLLM."""
    opts = [
        click.option("--tensor-parallel-size", default=1, show_default=True, type=click.IntRange(min=1),
                     help="vllm: GPUs per model."),
        click.option("--vllm-eager/--vllm-compile", "enforce_eager", default=None,
                     help="vllm: run the model eagerly, or compile it with torch.compile (default: eager on a CPU, "
                          "where compiling costs 1-3 minutes at every start; compiled on a GPU)."),
        click.option("--kv-cache-gib", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="vllm: KV cache size in GiB (default: 4 on a CPU; on a GPU, vLLM's share of its memory)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def pop_engine(kwargs: dict) -> dict:
    """The vLLM engine settings (PipelineConfig fields) from a command's keyword arguments, removing them."""
    return {k: kwargs.pop(k) for k in _ENGINE_KEYS}


_EXECUTOR_KEYS = ("executor", "ray_address", "workers", "cpus_per_worker", "gpus_per_worker")


def executor_options(f):
    """--executor and the Ray options, shared by score, generate, edit and study."""
    opts = [
        click.option("--executor", default="local", show_default=True,
                     help="Where the work runs: local (this process) or ray (a Ray cluster; "
                          "pip install 'sage-consistency[ray]')."),
        click.option("--ray-address", default=None,
                     help="Ray cluster address, e.g. ray://head:10001 or auto (default: RAY_ADDRESS, else a new "
                          "local cluster)."),
        click.option("--workers", type=click.IntRange(min=1), default=None,
                     help="Ray: worker processes (default: one per GPU of the cluster, else one per CPU)."),
        click.option("--cpus-per-worker", type=click.FloatRange(min=0, min_open=True), default=1.0,
                     show_default=True, help="Ray: CPUs reserved per worker (also its torch threads)."),
        click.option("--gpus-per-worker", type=click.FloatRange(min=0), default=None,
                     help="Ray: GPUs per worker (default: 1, or the tensor parallel size, when the cluster has "
                          "GPUs)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def pop_executor(kwargs: dict):
    """(executor name, ExecutorOptions) from a command's keyword arguments, removing them; an unknown
    executor name fails here, before any model loads."""

    values = {k: kwargs.pop(k) for k in _EXECUTOR_KEYS}
    EXECUTORS.get(values["executor"])
    return values["executor"], ExecutorOptions(
        address=values["ray_address"], workers=values["workers"], cpus_per_worker=values["cpus_per_worker"],
        gpus_per_worker=values["gpus_per_worker"])


_MEASURE_KEYS = ("se_equivalence", "se_clustering", "kle_kernel", "kle_t", "kle_nu", "kle_kappa",
                 "eccentricity_threshold", "num_sets_threshold")


def measure_options(f):
    """Semantic entropy's equivalence and clustering rules and the graph measures' hyperparameters
    (`sage.metrics.semantic_entropy`, `sage.metrics.graph_measures`)."""
    opts = [
        click.option("--se-equivalence", type=click.Choice(["loose", "strict"]), default="loose", show_default=True,
                     help="se: loose = no contradiction either way and not both neutral (get_semantic_ids' "
                          "default); strict = entailment both ways."),
        click.option("--se-clustering", type=click.Choice(["reference", "first-member", "chain"]),
                     default="reference", show_default=True,
                     help="se clusters: reference = get_semantic_ids (Farquhar et al.'s code); first-member = "
                          "Kuhn et al.'s Algorithm 1; chain = sage's earlier rule (chains non-transitive pairs)."),
        click.option("--kle-kernel", type=click.Choice(["heat", "matern"]), default="heat", show_default=True,
                     help="kle: the graph kernel."),
        click.option("--kle-t", type=float, default=0.3, show_default=True, help="kle: heat kernel time t."),
        click.option("--kle-nu", type=float, default=1.0, show_default=True, help="kle: Matern smoothness nu."),
        click.option("--kle-kappa", type=float, default=1.0, show_default=True, help="kle: Matern length scale kappa."),
        click.option("--eccentricity-threshold", type=float, default=0.9, show_default=True,
                     help="eccentricity: keep the Laplacian eigenvectors with eigenvalue below this."),
        click.option("--num-sets-threshold", type=float, default=0.5, show_default=True,
                     help="num_sets on edges that do not judge entailment: similarity above this joins two answers."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def pop_measures(kwargs: dict) -> dict:
    """ScoreConfig fields (se_equivalence, se_clustering, graph) from a command's keyword arguments,
    removing them."""

    values = {k: kwargs.pop(k) for k in _MEASURE_KEYS}
    se = {k: values.pop(k) for k in ("se_equivalence", "se_clustering")}
    return {**se, "graph": GraphOptions(**values)}
