"""The backend registry, backend options, and the one way to build a (cached) backend.

Backends live in their own modules and register themselves on import; `BACKENDS` names the
module for each, so optional dependencies (llama-cpp-python, vllm) load only when used.
Adding a backend = one module with `@BACKENDS.register("name")` + one entry below.
`sage.generation.factory.make_backend` builds one (here or on an executor's workers, cached).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Sequence

from sage.api import GenerationRequest, SamplingParams
from sage.errors import Interrupted, SageInputError
from sage.registry import Registry

BACKENDS: Registry[type] = Registry(
    "generation backend",
    lazy_modules={
        "transformers": "sage.generation.hf",
        "llamacpp": "sage.generation.llamacpp",
        "vllm": "sage.generation.vllm_backend",
        "openai": "sage.generation.openai_backend",
        "callable": "sage.generation.callable_backend",
    },
)


class BackendError(SageInputError):
    """A backend that cannot run (missing optional dependency, unreachable server after retries)."""


class PartialBatchError(BackendError):
    """Some requests of a batch failed; `done` maps request index -> Generation for the rest,
    so a caller (the generation cache) can keep the finished work before re-raising."""

    def __init__(self, message: str, done: dict):
        super().__init__(message)
        self.done = done


class BatchInterrupted(Interrupted):
    """Ctrl-C part way through a batch: `done` maps request index -> Generation for the requests
    that finished but were not yielded (those in flight when it was pressed), so the generation
    cache keeps them before the run stops."""

    def __init__(self, done: dict):
        super().__init__("interrupted")
        self.done = done


@dataclass(frozen=True)
class BackendOptions:
    """Runtime options; each backend reads the ones it uses."""

    device: str | None = None  # transformers: cpu / cuda (default: cuda when available)
    dtype: str = "auto"  # auto (bf16 on CUDA, fp32 on CPU), bfloat16, float16, float32: transformers and vllm
    device_map: str | None = None  # transformers: "auto" spreads a large model over the GPUs (accelerate)
    batch_size: int = 16  # transformers: prompts per forward pass (rows in flight)
    continuous_batching: bool = True  # transformers: a finished row's slot goes to a waiting prompt
    prefix_caching: bool = True  # transformers: the prompts' shared first tokens are run once
    base_urls: tuple[str, ...] = ()  # openai: one or more OpenAI-compatible endpoints
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 8  # openai: requests in flight
    max_retries: int = 5
    timeout: float = 60.0
    backoff: float = 0.5  # first retry delay in seconds, doubled each retry, with jitter
    retry_seed: int | None = None  # seeds the retry jitter (reproducible fault tests); None: random
    tensor_parallel_size: int = 1  # vllm
    enforce_eager: bool | None = None  # vllm: no torch.compile (default: True on a CPU, False on a GPU)
    kv_cache_gib: float | None = None  # vllm: KV cache size (default: 4 GiB on a CPU, vLLM's sizing on a GPU)
    n_ctx: int = 2048  # llamacpp
    n_threads: int | None = None  # llamacpp (default: all cores)
    extra: dict = field(default_factory=dict)


def request_seed(request: GenerationRequest) -> int:
    """A 31-bit seed from the user seed, the sample index and the prompt.

    Sampling with it does not depend on which other prompts share a batch.
    """
    blob = json.dumps(
        [request.params.seed, request.sample, request.prompt, request.messages], default=list
    )
    return int(hashlib.sha256(blob.encode()).hexdigest()[:8], 16) & 0x7FFFFFFF


def first_token_after(encode, prompt: str, candidate: str, prompt_ids: Sequence[int] | None = None) -> int:
    """The token that starts `candidate` when it is written right after `prompt`.

    Tokenizing in context gives the token the model would produce there (a leading space, or a
    sentencepiece word-start marker, comes out as it does in generation); when the prompt's own
    tokens change at the join, the candidate is tokenized alone. `encode(text)` -> token ids.
    """
    base = list(encode(prompt)) if prompt_ids is None else list(prompt_ids)
    full = list(encode(prompt + candidate))
    if len(full) > len(base) and full[: len(base)] == base:
        return int(full[len(base)])
    alone = list(encode(candidate))
    if not alone:
        raise SageInputError(f"candidate {candidate!r} has no tokens")
    return int(alone[0])


def build_requests(
    spec_format,
    message_lists: Sequence[tuple[tuple[str, str], ...]],
    params: SamplingParams,
    samples: Sequence[int] | None = None,
    inputs: Sequence[tuple[tuple[str, str], ...]] | None = None,
) -> list[GenerationRequest]:
    """Chat messages -> requests in the model's prompt format (chat, or rendered text).
    `inputs`: per request, the stage's bare inputs (see `GenerationRequest.inputs`)."""
    samples = list(samples) if samples is not None else [0] * len(message_lists)
    inputs = list(inputs) if inputs is not None else [()] * len(message_lists)
    if spec_format.stop:
        params = SamplingParams(**{**params.__dict__, "stop": tuple(params.stop) + spec_format.stop})
    out = []
    for msgs, s, named in zip(message_lists, samples, inputs):
        msgs = tuple(tuple(m) for m in msgs)
        if spec_format.chat:
            out.append(GenerationRequest(messages=msgs, params=params, sample=s, inputs=tuple(named)))
        else:
            out.append(GenerationRequest(prompt=spec_format.render(msgs), params=params, sample=s,
                                         inputs=tuple(named)))
    return out
