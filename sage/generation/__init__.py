"""Generation: backends (transformers, llama.cpp, vLLM, OpenAI-compatible), the model registry,
the generation cache, and the paraphrase -> answer -> Rule-of-Thumb pipeline.

Nothing heavy is imported here; backends load their libraries when first used.
"""
from sage.generation.base import BACKENDS, BackendOptions, make_backend
from sage.generation.models import MODELS, PROMPT_FORMATS, ModelSpec, resolve_model

__all__ = ["BACKENDS", "BackendOptions", "make_backend", "MODELS", "PROMPT_FORMATS", "ModelSpec", "resolve_model",
           "run_pipeline", "PipelineConfig"]


def __getattr__(name):
    if name in ("run_pipeline", "PipelineConfig"):
        from sage.generation import pipeline

        return getattr(pipeline, name)
    raise AttributeError(name)
