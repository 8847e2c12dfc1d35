"""NLI edges: an entailment model judges whether two answers say the same thing.

Any Hugging Face sequence-classification NLI model works (`microsoft/deberta-large-mnli`,
`cross-encoder/nli-deberta-v3-base`, ...); which output is entailment, neutral and contradiction is
read from the model's `config.id2label`, never assumed. Every ordered pair (premise i,
hypothesis j), i != j, of every group is scored, each distinct (premise, hypothesis) text pair once
per run, in length-sorted batches.

Inputs: when the group's question is known (a `question` column) and `question` is on (the
default), each side of a pair is "{question} {answer}", as the references do (Kuhn et al.'s
`get_semantic_similarities.py`, Farquhar et al.'s `--condition_on_question`, default on, and Lin
et al.'s `models/nli.py` all put the question before each answer); `--no-nli-question` sends the
answers alone.

Edge similarity (`nli_edge`):
- `entail` (default): S[i, j] = (P(entail | i, j) + P(entail | j, i)) / 2 (LM-Polygraph's and Lin
  et al.'s `entail`/`agreement_w` affinity, at NLI softmax temperature 1);
- `not-contradict`: S[i, j] = 1 - max(P(contradiction | i, j), P(contradiction | j, i)) (Lin et al.'s
  `disagreement_w` takes the mean of the two directions instead of the max);
- `graded`: S[i, j] = mean over both directions of P(entail) + 0.5 P(neutral): soft probabilities,
  as LM-Polygraph's KLE uses (the official KLE `get_entailment_graph` weights the argmax label
  one-hot, which is `kle-onehot`);
- `kle-onehot`: S[i, j] = mean over both directions of the argmax label's weight, entailment 1,
  neutral 0.5, contradiction 0: the official KLE `get_entailment_graph`'s weights.

Labels for semantic entropy: the most probable of the three labels for premise i, hypothesis j
(the argmax rule of every reference); i entails j when it is entailment. `agrees[i, j]`:
P(entail) > P(contradiction) (LM-Polygraph's NumSemSets). Identical texts are the same answer
(P(entailment) = 1, not sent to the model), as SGE puts them at distance 0.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from sage.api import EntailmentRelations, PairwiseSimilarity
from sage.errors import SageInputError
from sage.metrics.forward_clock import ForwardClock
from sage.metrics.similarity import SIMILARITIES
from sage.models.resolve import resolve_model_path

log = logging.getLogger(__name__)

EDGES = ("entail", "not-contradict", "graded", "kle-onehot")
LABELS = ("entailment", "neutral", "contradiction")


def label_indices(id2label: dict) -> dict[str, int]:
    """Output index of entailment / neutral / contradiction from a config's `id2label`."""
    found: dict[str, int] = {}
    for idx, name in id2label.items():
        key = str(name).strip().lower()
        for label, prefix in (("entailment", "entail"), ("neutral", "neutral"), ("contradiction", "contradict")):
            if key.startswith(prefix):
                if label in found:
                    raise SageInputError(f"NLI model: two outputs are named like {label!r} in id2label {id2label}")
                found[label] = int(idx)
    missing = [lab for lab in ("entailment", "contradiction") if lab not in found]
    if missing:
        raise SageInputError(
            f"NLI model: id2label {dict(id2label)} names no {' or '.join(missing)} output; pass a 3-way NLI model "
            "(entailment/neutral/contradiction) or fix id2label in its config.json"
        )
    return found


class NLIClassifier:
    """A sequence-classification NLI model: label probabilities of (premise, hypothesis) pairs."""

    def __init__(self, model: str, device: str | None = None, batch_size: int = 32, max_length: int = 512):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.path = str(resolve_model_path(model, what="NLI model"))
        self.device = device or "cpu"
        self.batch_size = max(1, batch_size)
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        self.model = AutoModelForSequenceClassification.from_pretrained(self.path).to(self.device).eval()
        self.labels = label_indices(self.model.config.id2label)
        self.max_length = min(max_length, int(getattr(self.tokenizer, "model_max_length", max_length) or max_length))
        self.clock = ForwardClock()
        self.clock.attach(self.model)

    def probabilities(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """len(pairs) x 3 array of P(entailment), P(neutral), P(contradiction) (neutral 0 if absent)."""
        import torch

        out = np.zeros((len(pairs), 3))
        if not pairs:
            return out
        # Pairs of similar length share a batch, so padding stays small.
        order = sorted(range(len(pairs)), key=lambda k: len(pairs[k][0]) + len(pairs[k][1]))
        cols = [self.labels.get(lab) for lab in LABELS]
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start:start + self.batch_size]
                enc = self.tokenizer([pairs[k][0] for k in idx], [pairs[k][1] for k in idx], padding=True,
                                     truncation=True, max_length=self.max_length, return_tensors="pt").to(self.device)
                probs = torch.softmax(self.model(**enc).logits.double(), dim=-1).cpu().numpy()
                for c, col in enumerate(cols):
                    if col is not None:
                        out[idx, c] = probs[:, col]
        return out


@SIMILARITIES.register("nli")
class NLISimilarity(PairwiseSimilarity):
    """Edge similarity from a 3-way NLI model, both directions of every pair (module docstring)."""

    name = "nli"
    judges_equivalence = True

    def __init__(self, model: str, edge: str = "entail", device: str | None = None, batch_size: int = 32,
                 question: bool = True):
        if edge not in EDGES:
            raise SageInputError(f"unknown NLI edge {edge!r}; choose one of {', '.join(EDGES)}")
        self.model_name = model
        self.edge = edge
        self.question = question
        self.classifier = NLIClassifier(model, device=device, batch_size=batch_size)
        self.clock = self.classifier.clock
        self._probs: dict[tuple[str, str], np.ndarray] = {}
        self.n_scored = 0  # ordered pairs sent to the model in this run

    @classmethod
    def from_options(cls, o):
        if not o.nli_model:
            raise SageInputError("--sge-edges nli needs --nli-model ID_OR_PATH (a Hugging Face NLI model, "
                                 "e.g. microsoft/deberta-large-mnli, in the local cache or as a path)")
        return cls(o.nli_model, edge=o.nli_edge, device=o.device, batch_size=o.nli_batch_size,
                   question=o.nli_question)

    def _inputs(self, groups, contexts) -> list[list[str]]:
        """The text each node is sent as: "{question} {answer}" when conditioning on a known question."""
        contexts = list(contexts) if contexts is not None else [None] * len(groups)
        return [[f"{q} {t}" for t in g] if self.question and q is not None and str(q).strip() else list(g)
                for g, q in zip(groups, contexts)]

    def _directional(self, groups, contexts=None) -> list[np.ndarray]:
        """Per group an n x n x 3 array: label probabilities for premise i, hypothesis j."""
        inputs = self._inputs(groups, contexts)
        todo = list(dict.fromkeys((a, b) for g, x in zip(groups, inputs) for i, a in enumerate(x)
                                  for j, b in enumerate(x) if g[i] != g[j] and (a, b) not in self._probs))
        if todo:
            log.info("NLI: %d ordered pairs", len(todo))
            for pair, p in zip(todo, self.classifier.probabilities(todo)):
                self._probs[pair] = p
            self.n_scored += len(todo)
        out = []
        for g, x in zip(groups, inputs):
            n = len(g)
            d = np.zeros((n, n, 3))
            for i in range(n):
                for j in range(n):
                    if g[i] == g[j]:
                        d[i, j, 0] = 1.0  # the same text entails itself
                    else:
                        d[i, j] = self._probs[(x[i], x[j])]
            out.append(d)
        return out

    def matrices(self, groups, contexts=None):
        mats = []
        for d in self._directional(groups, contexts):
            if self.edge == "entail":
                s = (d[..., 0] + d[..., 0].T) / 2
            elif self.edge == "graded":
                w = d[..., 0] + 0.5 * d[..., 1]
                s = (w + w.T) / 2
            elif self.edge == "kle-onehot":
                w = np.array([1.0, 0.5, 0.0])[np.argmax(d, axis=-1)]
                s = (w + w.T) / 2
            else:
                s = 1.0 - np.maximum(d[..., 2], d[..., 2].T)
            np.fill_diagonal(s, 1.0)
            mats.append(s)
        return mats

    def relations(self, groups, contexts=None):
        rels = []
        for d in self._directional(groups, contexts):
            labels = d.argmax(axis=-1)  # LABELS order: 0 entailment, 1 neutral, 2 contradiction
            rels.append(EntailmentRelations(labels == 0, {f"p_{lab}": d[..., k] for k, lab in enumerate(LABELS)},
                                            labels=labels, agrees=d[..., 0] > d[..., 2]))
        return rels

    def release(self):
        self._probs.clear()

    def describe(self):
        return {"name": self.name, "model": self.model_name, "path": self.classifier.path, "edge": self.edge,
                "labels": self.classifier.labels, "entailment_rule": "argmax label is entailment",
                "question_conditioning": self.question,
                "max_length": self.classifier.max_length, "ordered_pairs_scored": self.n_scored}
