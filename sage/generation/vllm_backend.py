"""`vllm` backend: vLLM's offline engine (optional extra, imported only here).

Tensor parallel size comes from `BackendOptions.tensor_parallel_size`. Every request carries
its own seed, so samples do not depend on batch composition. Candidate log-probabilities come
from vLLM's top-20 list at the first position (matched by token id, each candidate's first token
as tokenized right after the prompt; -inf when not listed).
"""
from __future__ import annotations

import logging
from typing import Sequence

from sage.api import Generation, GenerationBackend, GenerationRequest
from sage.generation.base import (
    BACKENDS,
    BackendError,
    BackendOptions,
    first_token_after,
    request_seed,
)

log = logging.getLogger(__name__)

TOP_K = 20  # vLLM's default max_logprobs
INSTALL_HINT = "the vllm backend needs vLLM: install it with `pip install 'sage-consistency[vllm]'` (Linux, CUDA GPU)"


@BACKENDS.register("vllm")
class VLLMBackend(GenerationBackend):
    name = "vllm"

    def __init__(self, model: str, options: BackendOptions | None = None):
        try:
            import vllm
        except ImportError:
            raise BackendError(INSTALL_HINT) from None
        from sage.models.causal_lm import model_dir

        self.options = options or BackendOptions()
        self._model_id = model
        self._vllm = vllm
        path = model_dir(model)  # local path, HF cache or a hub download (unless offline); GGUF dequantized once
        self.path = path
        self.dtype = self.options.dtype  # vLLM's own "auto": the checkpoint's dtype (fp32 -> fp16)
        self.llm = vllm.LLM(model=str(path), tensor_parallel_size=self.options.tensor_parallel_size,
                            dtype=self.dtype, seed=0)

    @property
    def model_id(self) -> str:
        return self._model_id

    def identity(self) -> dict:
        from sage.models.identity import fingerprint

        return {"backend": self.name, "model": self._model_id, "weights": fingerprint(self.path), "dtype": self.dtype}

    def _params(self, req: GenerationRequest):
        p = req.params
        return self._vllm.SamplingParams(
            n=1, temperature=p.temperature, top_p=p.top_p, max_tokens=p.max_new_tokens,
            seed=request_seed(req), stop=list(p.stop) or None,
            logprobs=TOP_K if p.candidates else (0 if p.logprobs else None),
        )

    def _candidate_ids(self, req: GenerationRequest) -> list[int]:
        """Each candidate's first token as written right after the prompt (`first_token_after`)."""
        tok = self.llm.get_tokenizer()
        if req.messages is not None:  # vLLM's chat renders the tokenizer's chat template
            text = tok.apply_chat_template([{"role": r, "content": c} for r, c in req.messages], tokenize=False,
                                           add_generation_prompt=True)
            special = False
        else:
            text, special = req.prompt, True
        return [first_token_after(lambda t: tok(t, add_special_tokens=special)["input_ids"], text, c)
                for c in req.params.candidates]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        results: list[Generation | None] = [None] * len(requests)
        chat = [i for i, r in enumerate(requests) if r.messages is not None]
        plain = [i for i, r in enumerate(requests) if r.messages is None]
        if chat:
            convs = [[{"role": r, "content": c} for r, c in requests[i].messages] for i in chat]
            outs = self.llm.chat(convs, sampling_params=[self._params(requests[i]) for i in chat], use_tqdm=False)
            for i, o in zip(chat, outs):
                results[i] = self._convert(o, requests[i])
        if plain:
            outs = self.llm.generate([requests[i].prompt for i in plain],
                                     sampling_params=[self._params(requests[i]) for i in plain], use_tqdm=False)
            for i, o in zip(plain, outs):
                results[i] = self._convert(o, requests[i])
        return results  # type: ignore[return-value]

    def _convert(self, out, req: GenerationRequest) -> Generation:
        c = out.outputs[0]
        lps, cands = None, None
        if req.params.logprobs and c.logprobs is not None:
            lps = [float(step[tid].logprob) for step, tid in zip(c.logprobs, c.token_ids)]
        if req.params.candidates and c.logprobs:
            first = c.logprobs[0]
            cands = {cand: float(first[t].logprob) if t in first else float("-inf")
                     for cand, t in zip(req.params.candidates, self._candidate_ids(req))}
        return Generation(text=c.text, token_logprobs=lps, finish_reason=c.finish_reason, candidate_logprobs=cands)

    def close(self) -> None:
        self.llm = None
