"""LLM-judge edges: a language model is asked whether two answers take the same position.

For every ordered pair (A = node i, B = node j) of a group the judge model gets `JUDGE_PROMPT`
(with the group's question when the responses table has one, else `JUDGE_PROMPT_NO_QUESTION`) as
a user message, and

    P(yes | i, j) = exp(lp_yes) / (exp(lp_yes) + exp(lp_no))

from the log-probabilities of the first token of "Yes" and of "No" at the first answer position
(`SamplingParams.candidates`; " Yes"/" No" with a leading space where the prompt format does not
end in whitespace), not from the sampled text. The edge similarity is
S[i, j] = (P(yes | i, j) + P(yes | j, i)) / 2; i entails j (for semantic entropy) when
P(yes | i, j) > 0.5, and the judgment is binary (yes = entailment, no = contradiction), so the
loose and strict equivalence rules of `sage.metrics.semantic_entropy` agree on judge edges.
Identical texts are the same answer (P = 1, no call), as SGE puts them at distance 0.

Calls go through the generation cache, in chunks, so a killed run resumes without repeating them.
A backend that returns no log-probabilities falls back to the greedy answer (starts with yes: 1,
with no: 0, otherwise 0.5); such pairs are counted and named in the run summary's warnings.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np

from sage.api import (
    EntailmentRelations,
    GenerationRequest,
    PairwiseSimilarity,
    SamplingParams,
)
from sage.errors import SageInputError
from sage.generation.backend_registry import BackendOptions, build_requests
from sage.generation.factory import make_backend
from sage.generation.model_specs import resolve_model
from sage.metrics.similarity import SIMILARITIES
from sage.progress import progress_bar

log = logging.getLogger(__name__)

JUDGE_PROMPT = (
    "Two responses were given to the same question.\n\n"
    "Question: {question}\n\n"
    "Response A: {a}\n\n"
    "Response B: {b}\n\n"
    "Do Response A and Response B take the same position on the question? Answer with Yes or No."
)
JUDGE_PROMPT_NO_QUESTION = (
    "Here are two responses.\n\n"
    "Response A: {a}\n\n"
    "Response B: {b}\n\n"
    "Do Response A and Response B take the same position? Answer with Yes or No."
)
CHUNK = 64  # requests per backend call: bounds the work a crash can lose


def judge_messages(a: str, b: str, question: str | None = None) -> tuple[tuple[str, str], ...]:
    if question is not None and str(question).strip():
        return (("user", JUDGE_PROMPT.format(question=question, a=a, b=b)),)
    return (("user", JUDGE_PROMPT_NO_QUESTION.format(a=a, b=b)),)


def p_yes_from_logprobs(lp_yes: float, lp_no: float) -> float:
    """P(yes) normalised over the two candidates; NaN when neither has any probability."""
    if lp_yes == -math.inf and lp_no == -math.inf:
        return float("nan")
    if lp_no == -math.inf:
        return 1.0
    return float(1.0 / (1.0 + math.exp(min(700.0, lp_no - lp_yes))))


def p_yes_from_text(text: str) -> float:
    t = text.strip().strip("\"'*").lower()
    return 1.0 if t.startswith("yes") else 0.0 if t.startswith("no") else 0.5


@SIMILARITIES.register("judge")
class JudgeSimilarity(PairwiseSimilarity):
    """P(same position) from an LLM judge, both orders averaged (module docstring)."""

    name = "judge"
    judges_equivalence = True

    def __init__(self, model: str, backend: str | None = None, base_urls: Sequence[str] = (),
                 device: str | None = None, batch_size: int = 16, cache_path: str | None = None):

        self.model_name = model
        self.spec = resolve_model(model, backend=backend or ("openai" if base_urls else None))
        options = BackendOptions(device=device, batch_size=batch_size, base_urls=tuple(base_urls))
        self.backend = make_backend(self.spec, options, cache_path=cache_path)
        fmt = self.spec.format
        spaced = not fmt.chat and not fmt.render((("user", "x"),))[-1:].isspace()
        self.candidates = (" Yes", " No") if spaced else ("Yes", "No")
        self.params = SamplingParams(max_new_tokens=3, temperature=0.0, candidates=self.candidates)
        self._p: dict[tuple, float] = {}
        self.n_pairs = 0
        self.n_fallback = 0

    @classmethod
    def from_options(cls, o):
        if not o.judge_model:
            raise SageInputError("--sge-edges judge needs --judge-model NAME (an alias such as smollm2-135m, "
                                 "a Hugging Face id in the local cache, a path, or an API model with --judge-base-url)")
        return cls(o.judge_model, backend=o.judge_backend, base_urls=o.judge_base_urls, device=o.device,
                   batch_size=o.judge_batch_size, cache_path=o.cache_path)

    def _judge(self, todo: list[tuple]) -> None:
        bar = progress_bar(total=len(todo), desc="judge pairs", unit="pair", enabled=None, leave=False)
        for start in range(0, len(todo), CHUNK):
            chunk = todo[start:start + CHUNK]
            reqs: list[GenerationRequest] = build_requests(
                self.spec.format, [judge_messages(a, b, q) for q, a, b in chunk], self.params)
            for key, gen in zip(chunk, self.backend.generate(reqs)):
                lps = gen.candidate_logprobs
                p = (p_yes_from_logprobs(lps[self.candidates[0]], lps[self.candidates[1]])
                     if lps is not None else float("nan"))
                if not np.isfinite(p):
                    p = p_yes_from_text(gen.text)
                    self.n_fallback += 1
                self._p[key] = p
                self.n_pairs += 1
            bar.update(len(chunk))
        bar.close()

    def directional(self, groups, contexts=None) -> list[np.ndarray]:
        """Per group the n x n matrix P(yes | A = i, B = j) (1 on the diagonal and for identical texts)."""
        contexts = list(contexts) if contexts is not None else [None] * len(groups)
        todo = list(dict.fromkeys((q, a, b) for g, q in zip(groups, contexts) for a in g for b in g
                                  if a != b and (q, a, b) not in self._p))
        if todo:
            log.info("judge %s: %d ordered pairs", self.model_name, len(todo))
            self._judge(todo)
        return [np.array([[1.0 if a == b else self._p[(q, a, b)] for b in g] for a in g], dtype=float)
                for g, q in zip(groups, contexts)]

    def matrices(self, groups, contexts=None):
        return [(p + p.T) / 2 for p in self.directional(groups, contexts)]

    def relations(self, groups, contexts=None):
        return [EntailmentRelations(p > 0.5, {"p_yes": p}) for p in self.directional(groups, contexts)]

    def release(self):
        self._p.clear()

    def warnings(self) -> list[str]:
        if not self.n_fallback:
            return []
        return [f"judge {self.model_name}: {self.n_fallback} of {self.n_pairs} pair judgments had no "
                f"log-probabilities from the {self.spec.backend} backend and used the greedy answer "
                "(yes = 1, no = 0, other = 0.5)"]

    def describe(self):
        return {"name": self.name, "model": self.model_name, "model_id": self.spec.model_id,
                "backend": self.spec.backend, "prompt_format": self.spec.prompt_format,
                "prompt": JUDGE_PROMPT, "prompt_without_question": JUDGE_PROMPT_NO_QUESTION,
                "candidates": list(self.candidates), "ordered_pairs_judged": self.n_pairs,
                "greedy_fallbacks": self.n_fallback}

    def close(self) -> None:
        self.backend.close()
