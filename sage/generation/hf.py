"""`transformers` backend: real batched generation on CPU or GPU.

Prompts are left-padded into one batch and decoded with one forward pass per step for the
whole batch (KV cache); finished rows are dropped from the batch. Sampling uses one random
generator per row seeded from (seed, sample, prompt), so a row's output does not depend on the
other rows in its batch; greedy decoding (temperature 0) gives the same text batched or alone.
"""
from __future__ import annotations

import logging
from typing import Sequence

from sage.api import Generation, GenerationBackend, GenerationRequest, SamplingParams
from sage.generation.base import BACKENDS, BackendOptions, first_token_after, request_seed

log = logging.getLogger(__name__)


@BACKENDS.register("transformers")
class TransformersBackend(GenerationBackend):
    name = "transformers"

    def __init__(self, model: str, options: BackendOptions | None = None):
        from sage.models.causal_lm import load_causal_lm
        from sage.settings import default_device

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
        eos = self.lm.model.generation_config.eos_token_id
        eos = eos if isinstance(eos, (list, tuple)) else [eos]
        self.eos_ids = {int(e) for e in list(eos) + [tok.eos_token_id] if e is not None}
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else next(iter(self.eos_ids))

    @property
    def model_id(self) -> str:
        return self._model_id

    def identity(self) -> dict:
        from sage.models.identity import fingerprint, text_digest

        return {"backend": self.name, "model": self._model_id,
                "weights": fingerprint(self.lm.source or self.lm.path),
                "dtype": str(next(self.lm.model.parameters()).dtype).replace("torch.", ""),
                "device": self.device.split(":")[0],
                "chat_template": text_digest(getattr(self.lm.tokenizer, "chat_template", None))}

    # ------------------------------------------------------------------ prompts
    def _prompt(self, req: GenerationRequest) -> tuple[str, bool]:
        """The prompt as text and whether the tokenizer adds special tokens to it."""
        tok = self.lm.tokenizer
        if req.messages is not None:
            if not getattr(tok, "chat_template", None):
                from sage.errors import SageInputError

                raise SageInputError(
                    f"model {self._model_id!r} has no chat template; pass --prompt-format "
                    "(llama2, mistral, vicuna, falcon, plain) to render prompts as text"
                )
            text = tok.apply_chat_template(
                [{"role": r, "content": c} for r, c in req.messages],
                tokenize=False,
                add_generation_prompt=True,
            )
            return text, False
        return req.prompt, True

    def _token_ids(self, req: GenerationRequest) -> list[int]:
        text, special = self._prompt(req)
        return self.lm.tokenizer(text, add_special_tokens=special)["input_ids"]

    def _candidate_ids(self, req: GenerationRequest, prompt_ids: list[int]) -> list[int]:
        """Each candidate's first token as written right after this prompt (`first_token_after`)."""
        text, special = self._prompt(req)
        tok = self.lm.tokenizer
        return [first_token_after(lambda t: tok(t, add_special_tokens=special)["input_ids"], text, c, prompt_ids)
                for c in req.params.candidates]

    # ------------------------------------------------------------------ generation
    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        results: list[Generation | None] = [None] * len(requests)
        ids = [self._token_ids(r) for r in requests]
        cands = [self._candidate_ids(r, p) if r.params.candidates else [] for r, p in zip(requests, ids)]
        # Group by sampling parameters, then batch prompts of similar length together.
        groups: dict[SamplingParams, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(r.params, []).append(i)
        bs = max(1, self.options.batch_size)
        for params, idx in groups.items():
            idx = sorted(idx, key=lambda i: len(ids[i]))
            for start in range(0, len(idx), bs):
                chunk = idx[start : start + bs]
                outs = self._generate_batch(
                    [ids[i] for i in chunk], params, [request_seed(requests[i]) for i in chunk],
                    [cands[i] for i in chunk],
                )
                for i, g in zip(chunk, outs):
                    results[i] = g
        return results  # type: ignore[return-value]

    def _generate_batch(self, prompts: list[list[int]], params: SamplingParams, seeds: list[int],
                        cand_ids: list[list[int]] | None = None) -> list[Generation]:
        import torch

        model, tok, dev = self.lm.model, self.lm.tokenizer, self.device
        n, width = len(prompts), max(len(p) for p in prompts)
        input_ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((n, width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attn[i, width - len(p) :] = 1
        input_ids, attn = input_ids.to(dev), attn.to(dev)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        sampling = params.temperature > 0
        gens = [torch.Generator(device=dev).manual_seed(s) for s in seeds] if sampling else []
        tokens: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        finish = ["length"] * n
        cand_lps: list[list[float]] = [[] for _ in range(n)]
        active = list(range(n))  # original row of each batch row
        stop_tail = max((len(s) for s in params.stop), default=0) + 16

        with torch.inference_mode():
            out = model(input_ids=input_ids, attention_mask=attn, position_ids=pos, use_cache=True, logits_to_keep=1)
            past, logits = out.cache, out.logits[:, -1, :].float()
            pos = pos[:, -1:]
            for _step in range(params.max_new_tokens):
                logp = torch.log_softmax(logits, dim=-1)
                if _step == 0 and params.candidates:  # every row is still active at the first step
                    cand_lps = logp.gather(1, torch.tensor(cand_ids, device=logp.device)).tolist()
                nxt = self._pick(logits, params, [gens[r] for r in active] if sampling else None)
                chosen = logp.gather(1, nxt[:, None])[:, 0].tolist()
                nxt_list = nxt.tolist()
                keep = []
                for b, row in enumerate(active):
                    t = nxt_list[b]
                    if t in self.eos_ids:
                        finish[row] = "stop"
                        continue
                    tokens[row].append(t)
                    logprobs[row].append(chosen[b])
                    if params.stop and any(
                        s in tok.decode(tokens[row][-stop_tail:], skip_special_tokens=True) for s in params.stop
                    ):
                        finish[row] = "stop"
                        continue
                    keep.append(b)
                if not keep or _step == params.max_new_tokens - 1:
                    break
                if len(keep) < len(active):
                    sel = torch.tensor(keep, device=dev)
                    past.batch_select_indices(sel)
                    attn, pos, nxt = attn[sel], pos[sel], nxt[sel]
                    active = [active[b] for b in keep]
                attn = torch.cat([attn, torch.ones((len(active), 1), dtype=attn.dtype, device=dev)], dim=1)
                pos = pos + 1
                out = model(
                    input_ids=nxt[:, None], attention_mask=attn, position_ids=pos,
                    cache=past, use_cache=True,
                )
                past, logits = out.cache, out.logits[:, -1, :].float()

        results = []
        for row in range(n):
            text = tok.decode(tokens[row], skip_special_tokens=True)
            for s in params.stop:
                cut = text.find(s)
                if cut >= 0:
                    text = text[:cut]
            results.append(
                Generation(
                    text=text,
                    token_logprobs=logprobs[row] if params.logprobs else None,
                    finish_reason=finish[row],
                    candidate_logprobs=dict(zip(params.candidates, cand_lps[row])) if params.candidates else None,
                )
            )
        return results

    @staticmethod
    def _pick(logits, params: SamplingParams, gens):
        import torch

        if gens is None:
            return logits.argmax(dim=-1)
        probs = torch.softmax(logits / params.temperature, dim=-1)
        if params.top_p < 1.0:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            drop = sorted_p.cumsum(-1) - sorted_p > params.top_p
            sorted_p = sorted_p.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        picks = [torch.multinomial(probs[b], 1, generator=g) for b, g in enumerate(gens)]
        return torch.cat(picks)

    def close(self) -> None:
        return None
