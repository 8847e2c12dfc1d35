"""SERAC-ICL: a training-light stand-in for SERAC (Mitchell et al., 2022); `serac` (serac.py) is
SERAC as published.

- Edit memory: the applied requests.
- Scope classifier: logistic regression on frozen sentence-embedding pair features
  ([u*v, |u-v|], the bundled MiniLM) of (edit prompt, query), trained on the pool's in-scope
  prompts (action and relation paraphrases) versus out-of-scope prompts (neighbourhood prompts)
  of *other* entries of the pool.
- Counterfactual model: the *untrained* base model prompted with the retrieved edit ("New Fact:
  ..."), used only for queries the classifier puts in scope; other queries go to the unchanged
  base model. Unlike SERAC, nothing is fine-tuned: this is in-context editing behind a router.

Sequential editing (`sage edit --sequential`): the memory grows, one entry per edit, every query
routed over all edits so far; the classifier is trained once, before the first edit, on the pool
(in a sequence: the other subset's entries) less every entry of the sequence.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from sage.api import TargetScore, TargetScorer
from sage.editing.editor_base import EDITORS, EditorBase, HParams, MemoryEdits, check
from sage.editing.dataset import EditRequest
from sage.editing.handles import WrapperHandle
from sage.editing.ike import embed, fact_line
from sage.editing.target_scoring import LMScorer
from sage.errors import SageInputError


@dataclass(frozen=True)
class SeracIclHParams(HParams):
    threshold: float = 0.5  # in-scope when the classifier's probability exceeds this
    C: float = 1.0  # inverse regularization of the logistic regression
    embedder: str = ""

    def __post_init__(self):
        name = type(self).__name__
        check(0 < self.threshold < 1, name, "threshold must be in (0, 1)")
        check(self.C > 0, name, "C must be > 0")


def pair_features(u, v):
    return np.concatenate([u * v, np.abs(u - v)], axis=-1)


class SeracIclScorer(TargetScorer):
    """Routes each query: in scope of a memorized edit -> counterfactual prompt, else base model."""

    def __init__(self, base: LMScorer, memory: Sequence[EditRequest], classifier, threshold: float,
                 embedder: str | None):
        self.base = base
        self.memory = list(memory)
        self.classifier = classifier
        self.threshold = threshold
        self.embedder = embedder
        self._mem_emb = embed([m.prompt for m in self.memory], embedder)
        self.calls = 0
        self.routed_in_scope = 0

    def route(self, prompts: Sequence[str]) -> list[EditRequest | None]:
        q = embed(prompts, self.embedder)
        out = []
        for row in q:
            feats = pair_features(self._mem_emb, np.repeat(row[None], len(self.memory), 0))
            probs = self.classifier.predict_proba(feats)[:, 1]
            best = int(np.argmax(probs))
            out.append(self.memory[best] if probs[best] > self.threshold else None)
        return out

    def _routed(self, prompts: Sequence[str]):
        routes = self.route(prompts)
        self.routed_in_scope += sum(r is not None for r in routes)
        return routes, [p if r is None else f"{fact_line(r)}\nPrompt: {p}" for p, r in zip(prompts, routes)]

    def condition_prompts(self, prompts: Sequence[str]) -> list[str]:
        """In-scope prompts go to the counterfactual model (the base model given the edit)."""
        return self._routed(prompts)[1]

    def score(self, prompts: Sequence[str], targets: Sequence[str]) -> list[TargetScore]:
        self.calls += 1
        routes, conditioned = self._routed(prompts)
        return [dataclasses.replace(s, routed=r is not None)
                for s, r in zip(self.base.score(conditioned, targets), routes)]


@EDITORS.register("serac-icl")
class SeracIclEditor(MemoryEdits, EditorBase):
    name = "serac-icl"
    supports_batch = True
    supports_sequential = True
    uses_pool = True
    hparams_cls = SeracIclHParams

    def __init__(self, hparams=None, context=None):
        super().__init__(hparams, context)
        self._emb: dict[str, Any] = {}
        self._memory: list[EditRequest] = []  # a sequence's edits so far
        self._classifier = None  # a sequence's, trained once

    def _embed_pool(self, entries: Sequence[EditRequest]) -> None:
        texts = [t for e in entries for t in (e.prompt, *e.action_paraphrases,
                                              *e.relation_paraphrases, *e.neighbourhood)]
        new = [t for t in dict.fromkeys(texts) if t not in self._emb]
        if new:
            for t, v in zip(new, embed(new, self.hparams.embedder or None)):
                self._emb[t] = v

    def train_classifier(self, exclude: set[str]):
        from sklearn.linear_model import LogisticRegression

        train = [e for e in self.context.pool if e.uid not in exclude]
        if len(train) < 2:
            raise SageInputError("SERAC needs at least two other entries to train its scope "
                                 "classifier; run on a larger subset (drop --limit 1)")
        self._embed_pool(train)
        X, y = [], []
        for e in train:
            u = self._emb[e.prompt]
            for t in (*e.action_paraphrases, *e.relation_paraphrases):
                X.append(pair_features(u, self._emb[t]))
                y.append(1)
            for t in e.neighbourhood:
                X.append(pair_features(u, self._emb[t]))
                y.append(0)
        clf = LogisticRegression(C=self.hparams.C, max_iter=1000, class_weight="balanced",
                                 random_state=self.hparams.seed)
        clf.fit(np.stack(X), np.array(y))
        return clf

    def apply(self, lm: Any, requests: Sequence[Any]) -> WrapperHandle:
        clf = self.train_classifier({r.uid for r in requests})
        scorer = SeracIclScorer(LMScorer(lm.model, lm.tokenizer), requests, clf,
                             self.hparams.threshold, self.hparams.embedder or None)
        return WrapperHandle(scorer, None, {"memory": len(requests)})

    # ------------------------------------------------------------------ sequential
    def start_sequence(self, lm: Any, sequence: Sequence[Any]) -> None:
        self._classifier = self.train_classifier({r.uid for r in sequence})
        self._memory = []

    def memory_scorer(self, lm: Any) -> SeracIclScorer:
        return SeracIclScorer(LMScorer(lm.model, lm.tokenizer), self._memory, self._classifier,
                              self.hparams.threshold, self.hparams.embedder or None)
