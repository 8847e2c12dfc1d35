"""`transformers` backend: real batched generation on CPU or GPU.

Prompts are left-padded into a batch and decoded with one forward pass per step for the whole
batch (KV cache); a finished row leaves the batch and a waiting prompt takes its slot
(continuous batching, `sage.generation.hf_batching`). Sampling uses one random
generator per row seeded from (seed, sample, prompt), so a row's output does not depend on the
other rows in its batch; greedy decoding (temperature 0) gives the same text batched or alone.
"""
from __future__ import annotations

import logging
from typing import Iterator, Sequence

from sage.api import Generation, GenerationRequest, SamplingParams, StreamingBackend
from sage.generation.backend_registry import BACKENDS, BackendOptions, request_seed
from sage.generation.hf_batching import decode
from sage.generation.prompt_tokens import PromptTokens, eos_token_ids
from sage.models.causal_lm import load_causal_lm
from sage.models.identity import fingerprint, text_digest
from sage.settings import default_device

log = logging.getLogger(__name__)


@BACKENDS.register("transformers")
class TransformersBackend(StreamingBackend):
    name = "transformers"
    reports_sampled_logprobs = True

    def __init__(self, model: str, options: BackendOptions | None = None):
        self.options = options or BackendOptions()
        self.device = self.options.device or default_device()
        self._model_id = model
        self.lm = load_causal_lm(model, device=self.device, dtype=self.options.dtype,
                                 device_map=self.options.device_map)
        if self.options.device_map:  # inputs go where the first layers are
            self.device = str(self.lm.model.device)
        self._init_tokens()

    @classmethod
    def from_loaded(cls, lm, model_id: str, options: BackendOptions | None = None) -> "TransformersBackend":
        """A backend on a model already in memory (e.g. one being edited), without reloading it."""
        self = cls.__new__(cls)
        self.options = options or BackendOptions()
        self.device = str(next(lm.model.parameters()).device)
        self._model_id = model_id
        self.lm = lm
        self._init_tokens()
        return self

    def _init_tokens(self) -> None:
        tok = self.lm.tokenizer
        self.prompts = PromptTokens(tok, self._model_id)
        self.eos_ids = eos_token_ids(tok, self.lm.model.generation_config)
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else next(iter(self.eos_ids))

    @property
    def model_id(self) -> str:
        return self._model_id

    def identity(self) -> dict:
        return {"backend": self.name, "model": self._model_id,
                "weights": fingerprint(self.lm.source or self.lm.path),
                "dtype": str(next(self.lm.model.parameters()).dtype).replace("torch.", ""),
                "device": self.device.split(":")[0],
                "chat_template": text_digest(getattr(self.lm.tokenizer, "chat_template", None))}

    # ------------------------------------------------------------------ generation
    def generate_iter(self, requests: Sequence[GenerationRequest]) -> Iterator[tuple[int, Generation]]:
        """Yield (request index, generation) as each row finishes.

        Requests are grouped by sampling parameters and queued shortest prompt first; with
        `continuous_batching` a row that finishes is replaced by the next waiting prompt (see
        `sage.generation.hf_batching`), otherwise the queue is decoded in fixed batches; with
        `prefix_caching` the first tokens all prompts of a group share are run once."""

        ids = [self.prompts.ids(r) for r in requests]
        cands = [self.prompts.candidate_ids(r, p) if r.params.candidates else [] for r, p in zip(requests, ids)]
        groups: dict[SamplingParams, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(r.params, []).append(i)
        for params, idx in groups.items():
            idx = sorted(idx, key=lambda i: len(ids[i]))
            rows = decode(self, [ids[i] for i in idx], params, [request_seed(requests[i]) for i in idx],
                          width=max(1, self.options.batch_size), refill=self.options.continuous_batching,
                          reuse_prefix=self.options.prefix_caching,
                          cand_ids=[cands[i] for i in idx])
            for j, g in rows:
                yield idx[j], g

    @staticmethod
    def _pick(logits, params: SamplingParams, gens):
        """Next token per row and its log-probability under the distribution it was drawn from:
        softmax(logits / temperature), top-p truncated and renormalised. Greedy (`gens` None): the
        argmax and None (the distribution is the model's own, whose log-probs the caller has)."""
        import torch

        if gens is None:
            return logits.argmax(dim=-1), None
        scaled = logits / params.temperature
        probs = torch.softmax(scaled, dim=-1)
        kept = None
        if params.top_p < 1.0:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            drop = sorted_p.cumsum(-1) - sorted_p > params.top_p
            sorted_p = sorted_p.masked_fill(drop, 0.0)
            kept = sorted_p.sum(-1)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        nxt = torch.cat([torch.multinomial(probs[b], 1, generator=g) for b, g in enumerate(gens)])
        lp = torch.log_softmax(scaled, dim=-1).gather(1, nxt[:, None])[:, 0]
        return nxt, (lp - kept.log() if kept is not None else lp)

    def close(self) -> None:
        return None
