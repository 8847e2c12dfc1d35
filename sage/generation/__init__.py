"""Generation: backends (transformers, llama.cpp, vLLM, OpenAI-compatible), the model registry,
the generation cache, and the answer and Rule-of-Thumb stages.

The paraphrase -> answer -> RoT orchestration lives above this package, in `sage.pipeline`.
Nothing heavy is imported here; backends load their libraries when first used.
"""
from sage.generation.backend_registry import BACKENDS, BackendOptions
from sage.generation.factory import make_backend
from sage.generation.model_specs import MODELS, PROMPT_FORMATS, ModelSpec, resolve_model

__all__ = ["BACKENDS", "BackendOptions", "make_backend", "MODELS", "PROMPT_FORMATS", "ModelSpec", "resolve_model"]
