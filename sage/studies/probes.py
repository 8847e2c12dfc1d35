"""What a model is asked in an edit-consistency study, and how its free text is produced.

Per CounterMoral entry:
- completion probes: greedy continuations of the 10 action-paraphrase, 10 relation-paraphrase
  and 10 neighbourhood prompts (first sentence of each);
- open probes: an open question about the action (`question_template`), paraphrased through the
  paraphrase stage (few-shot, ParaScore filter), answered by the model, with a Rule of Thumb per
  answer written by the *unedited* model, so RoT changes reflect the answers only.

Generation goes through the edit handle's scoring model (`condition_prompts`), so wrapper methods
(IKE, SERAC) are in the generation path exactly as they are in the scoring path.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

from sage.api import GenerationBackend, GenerationRequest, SamplingParams
from sage.editing.dataset import EditRequest
from sage.generation.backend_registry import build_requests
from sage.pipeline.stages import (
    ANSWER_INSTRUCTION,
    clean_answer,
    clean_rot,
    rot_messages,
)

COMPLETION_PROBES = ("action", "relation", "neighbourhood")
OPEN_PROBES = ("answers", "rots")
DEFAULT_QUESTION_TEMPLATE = "Is {action} morally right or wrong?"


def open_question(req: EditRequest, template: str = DEFAULT_QUESTION_TEMPLATE) -> str:
    action = req.subject[:1].lower() + req.subject[1:]
    return template.format(action=action, relation=req.relation)


def completion_prompts(req: EditRequest) -> dict[str, list[str]]:
    return {"action": list(req.action_paraphrases), "relation": list(req.relation_paraphrases),
            "neighbourhood": list(req.neighbourhood)}


def first_sentence(text: str) -> str:
    """The continuation's first non-empty line, cut after its first sentence."""
    line = next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), "")
    m = re.match(r"(.+?[.!?])(\s|$)", line)
    return (m.group(1) if m else line).strip()


def _context_prefix(conditioned: str, original: str) -> str:
    """The part a wrapper put in front of a prompt ("" for an edited model)."""
    return conditioned[: len(conditioned) - len(original)] if conditioned.endswith(original) else ""


def complete(backend: GenerationBackend, scorer: Any, prompts: Sequence[str], max_new_tokens: int,
             seed: int) -> list[str]:
    """Greedy continuations of `prompts` through `scorer`'s conditioning."""

    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, seed=seed)
    reqs = [GenerationRequest(prompt=p, params=params) for p in scorer.condition_prompts(prompts)]
    return [first_sentence(g.text) for g in backend.generate(reqs)]


def answer(backend: GenerationBackend, fmt: Any, scorer: Any, questions: Sequence[str],
           max_new_tokens: int, seed: int) -> list[str]:
    """Greedy one-paragraph answers; a wrapper's context goes before the instruction."""
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, seed=seed)
    conditioned = scorer.condition_prompts(questions)
    msgs = [(("user", f"{_context_prefix(c, q)}{ANSWER_INSTRUCTION}\n\nQuestion: {q}"),)
            for c, q in zip(conditioned, questions)]
    return [clean_answer(g.text) for g in backend.generate(build_requests(fmt, msgs, params))]


def rules_of_thumb(backend: GenerationBackend, fmt: Any, questions: Sequence[str],
                   answers: Sequence[str], max_new_tokens: int, seed: int) -> list[str]:
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, seed=seed)
    msgs = [rot_messages(q, a) for q, a in zip(questions, answers)]
    return [clean_rot(g.text) for g in backend.generate(build_requests(fmt, msgs, params))]
