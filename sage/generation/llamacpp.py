"""`llamacpp` backend: in-process llama-cpp-python for GGUF files (the CPU speed reference).

Requests run one after another (llama-cpp-python has no batched API); each carries its own
seed. Sampling is plain temperature + top-p (llama.cpp's default top-k, min-p and repeat
penalty are switched off), so outputs follow the same rules as the other backends, and the
context is reset before every request so (seed, sample) is reproducible. Per-token
log-probabilities and candidate log-probabilities need a context that keeps all logits; it is
created on first need. Candidate log-probabilities come from the logits row of the last prompt
token (a full-vocabulary log-softmax), as llama.cpp computes its own `logprobs`.
"""
from __future__ import annotations

import importlib.util
import logging
import os
from typing import Iterator, Sequence

import numpy as np

from sage.api import Generation, GenerationRequest, StreamingBackend
from sage.errors import SageInputError
from sage.generation.backend_registry import (
    BACKENDS,
    BackendError,
    BackendOptions,
    first_token_after,
    request_seed,
)
from sage.models.identity import fingerprint
from sage.models.resolve import resolve_model_path

log = logging.getLogger(__name__)


@BACKENDS.register("llamacpp")
class LlamaCppBackend(StreamingBackend):
    name = "llamacpp"

    def __init__(self, model: str, options: BackendOptions | None = None):
        if importlib.util.find_spec("llama_cpp") is None:
            raise BackendError(
                "the llamacpp backend needs llama-cpp-python: `pip install 'sage-consistency[bundled]'`"
            )

        self.options = options or BackendOptions()
        self._model_id = model
        path = resolve_model_path(model, what="GGUF model")
        if not (path.is_file() and path.suffix.lower() == ".gguf"):
            raise SageInputError(
                f"the llamacpp backend needs a .gguf file, but {model!r} is {path}; pass a .gguf path, "
                "or use --backend transformers"
            )
        self.path = path
        self._llms: dict[bool, object] = {}
        self._llm(False)

    def _llm(self, logits_all: bool):
        if logits_all not in self._llms:
            from llama_cpp import Llama

            self._llms[logits_all] = Llama(
                model_path=str(self.path), n_ctx=self.options.n_ctx, logits_all=logits_all,
                n_threads=self.options.n_threads or os.cpu_count(), seed=0, verbose=False,
            )
        return self._llms[logits_all]

    @property
    def model_id(self) -> str:
        return self._model_id

    def identity(self) -> dict:
        # The chat template is GGUF metadata, so the file's fingerprint covers it.
        return {"backend": self.name, "model": self._model_id, "weights": fingerprint(self.path)}

    def generate_iter(self, requests: Sequence[GenerationRequest]) -> Iterator[tuple[int, Generation]]:
        for i, r in enumerate(requests):  # one at a time: each is cached and recorded as it finishes
            yield i, self._one(r)

    def _one(self, req: GenerationRequest) -> Generation:
        gen, n_prompt = self._complete(req)
        if req.params.candidates:
            gen.candidate_logprobs = self._candidate_logprobs(req, n_prompt)
        return gen

    def _candidate_logprobs(self, req: GenerationRequest, n_prompt: int) -> dict[str, float]:
        """Completion prompts: each candidate's first token as written right after the prompt
        (`first_token_after`); chat prompts (rendered inside llama.cpp): the candidate tokenized alone."""


        llm = self._llm(True)
        row = np.asarray(llm.scores[n_prompt - 1], dtype=np.float64)  # logits for the first new token
        logp = row - row.max() - np.log(np.exp(row - row.max()).sum())
        out = {}
        for c in req.params.candidates:
            if req.prompt is not None:
                tid = first_token_after(lambda t: llm.tokenize(t.encode("utf-8"), add_bos=True, special=False),
                                        req.prompt, c)
            else:
                toks = llm.tokenize(c.encode("utf-8"), add_bos=False, special=False)
                if not toks:
                    raise SageInputError(f"candidate {c!r} has no tokens for model {self._model_id!r}")
                tid = toks[0]
            out[c] = float(logp[tid])
        return out

    def _complete(self, req: GenerationRequest) -> tuple[Generation, int]:
        p = req.params
        llm = self._llm(p.logprobs or bool(p.candidates))
        # Reusing the KV cache of the previous prompt changes the numbers slightly, and with them
        # sampled tokens; a fresh context per request keeps (seed, sample) reproducible.
        llm.reset()
        kwargs = dict(max_tokens=p.max_new_tokens, temperature=p.temperature, top_p=p.top_p, top_k=0,
                      min_p=0.0, repeat_penalty=1.0, seed=request_seed(req), stop=list(p.stop) or None)
        if req.messages is not None:
            out = llm.create_chat_completion(
                messages=[{"role": r, "content": c} for r, c in req.messages],
                logprobs=p.logprobs or None, top_logprobs=0 if p.logprobs else None, **kwargs,
            )
            choice = out["choices"][0]
            lps = None
            if p.logprobs and choice.get("logprobs"):
                lps = [float(t["logprob"]) for t in choice["logprobs"]["content"]]
            return Generation(text=choice["message"]["content"] or "", token_logprobs=lps,
                              finish_reason=choice.get("finish_reason")), out["usage"]["prompt_tokens"]
        out = llm.create_completion(prompt=req.prompt, logprobs=1 if p.logprobs else None, **kwargs)
        choice = out["choices"][0]
        lps = None
        if p.logprobs and choice.get("logprobs"):
            lps = [float(x) for x in choice["logprobs"]["token_logprobs"]]
        return (Generation(text=choice["text"], token_logprobs=lps, finish_reason=choice.get("finish_reason")),
                out["usage"]["prompt_tokens"])

    def close(self) -> None:
        for llm in self._llms.values():
            close = getattr(llm, "close", None)
            if close:
                close()
        self._llms.clear()
