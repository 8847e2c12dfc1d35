"""sage: Semantic Graph Entropy consistency of language models on moral questions.

Heavy submodules are imported lazily so that `import sage` stays cheap.
"""
from sage.version import __version__

__all__ = ["score", "score_responses", "read_responses", "write_responses", "sge_from_distances", "run_pipeline",
           "PipelineConfig", "__version__"]


def __getattr__(name: str):
    # Lazy re-exports: nothing heavy runs at import time.
    if name == "score_responses":
        from sage.scoring import score_responses

        return score_responses
    if name in ("read_responses", "write_responses"):
        from sage.data import responses

        return getattr(responses, name)
    if name in ("score", "run_pipeline", "PipelineConfig"):
        from sage import pipeline

        return getattr(pipeline, name)
    if name == "sge_from_distances":
        from sage.metrics.sge import sge_from_distances

        return sge_from_distances
    raise AttributeError(f"module 'sage' has no attribute {name!r}")


def __dir__() -> list[str]:
    # The lazy exports are attributes too (PEP 562): list them beside what is already loaded.
    return sorted(set(globals()) | set(__all__))
