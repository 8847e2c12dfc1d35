"""Pairwise text similarities: the baselines, and the edge weights SGE can be computed over.

Every similarity sees all groups (questions) of a run at once, so model-based ones encode each
distinct text exactly once, in batches, with a model loaded once per run.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from sage.api import PairwiseSimilarity
from sage.metrics import lexical
from sage.metrics.encoder import greedy_bertscore_f1, shared_encoder
from sage.metrics.forward_clock import ForwardClock
from sage.models.resolve import resolve_model_path
from sage.registry import Registry

log = logging.getLogger(__name__)

# The equivalence judges load torch/transformers or a generation backend only when used.
SIMILARITIES: Registry[type[PairwiseSimilarity]] = Registry(
    "similarity", lazy_modules={"nli": "sage.metrics.nli", "judge": "sage.metrics.judge"})


def _unique_index(groups: Sequence[Sequence[str]]) -> tuple[list[str], list[np.ndarray]]:
    """Distinct texts across all groups and, per group, the index of each text in that list."""
    position: dict[str, int] = {}
    index = []
    for g in groups:
        index.append(np.array([position.setdefault(t, len(position)) for t in g], dtype=np.int64))
    return list(position), index


def _pair_lists(groups: Sequence[Sequence[str]]):
    """All pairs i < j of every group as flat (reference, candidate) lists plus their positions."""
    refs, cands, where = [], [], []
    for gi, g in enumerate(groups):
        for i in range(len(g)):
            for j in range(i + 1, len(g)):
                refs.append(g[i])
                cands.append(g[j])
                where.append((gi, i, j))
    return refs, cands, where


def _fill_symmetric(groups, where, values) -> list[np.ndarray]:
    mats = [np.eye(len(g)) for g in groups]
    for (gi, i, j), v in zip(where, values):
        mats[gi][i, j] = mats[gi][j, i] = v
    return mats


def upper_mean(sim: np.ndarray) -> float:
    """Mean over the C(n,2) pairs i < j (reference = the earlier text), as the baselines define it."""
    n = sim.shape[0]
    if n < 2:
        return float("nan")
    iu = np.triu_indices(n, k=1)
    return float(np.mean(sim[iu]))


@SIMILARITIES.register("cosine")
class CosineSimilarity(PairwiseSimilarity):
    """Cosine similarity of sentence-transformers embeddings (default: bundled all-MiniLM-L6-v2)."""

    name = "cosine"

    def __init__(self, model: str | None = None, device: str | None = None, backend: str = "torch"):
        self.model_name = model or "all-minilm-l6-v2"
        self.encoder = shared_encoder(model, device, backend)
        self.clock = self.encoder.clock

    @classmethod
    def from_options(cls, o):
        return cls(model=o.embedder, device=o.device, backend=o.encoder_backend)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.encoder.sentence_embeddings(texts)

    def matrices(self, groups, contexts=None):
        unique, index = _unique_index(groups)
        emb = self.embed(unique)
        return [emb[ix] @ emb[ix].T for ix in index]

    def describe(self):
        return {"name": self.name, "model": self.model_name, "encoder_backend": self.encoder.backend}

    def release(self):
        self.encoder.clear_cache()


@SIMILARITIES.register("bertscore")
class BertScoreSimilarity(PairwiseSimilarity):
    """BERTScore F1 (no idf, no baseline rescaling).

    When the BERTScore model is the run's sentence encoder at its last layer (the default), the
    token embeddings come from the shared encoder's single forward pass per text and are matched
    with numpy; otherwise one `bert_score.BERTScorer` is built per run for the chosen model/layer.
    """

    name = "bertscore"

    def __init__(self, model: str | None = None, num_layers: int | None = None,
                 device: str | None = None, batch_size: int = 64, embedder: str | None = None,
                 backend: str = "torch"):

        self.model_name = model or embedder or "all-minilm-l6-v2"
        self.batch_size = batch_size
        encoder = shared_encoder(embedder, device, backend)
        path = str(resolve_model_path(model, what="BERTScore model")) if model else encoder.path
        self.num_layers = num_layers or self._layer_count(path)
        self.shared = path == encoder.path and self.num_layers == encoder.num_layers
        if self.shared:
            self.encoder, self.clock = encoder, encoder.clock
        else:
            from bert_score import BERTScorer

            # The fast tokenizer gives the same ids as the slow one and keeps tokenization cheap.
            self.scorer = BERTScorer(model_type=path, num_layers=self.num_layers, device=device or "cpu",
                                     use_fast_tokenizer=True)
            self.clock = ForwardClock()
            self.clock.attach(self.scorer._model)

    @staticmethod
    def _layer_count(path: str) -> int:
        from transformers import AutoConfig

        return int(AutoConfig.from_pretrained(path).num_hidden_layers)

    @classmethod
    def from_options(cls, o):
        return cls(model=o.bertscore_model, num_layers=o.bertscore_layers, device=o.device, embedder=o.embedder,
                   backend=o.encoder_backend)

    def matrices(self, groups, contexts=None):
        if self.shared:

            return [greedy_bertscore_f1(self.encoder.token_embeddings(g)) if len(g) > 1 else np.eye(len(g))
                    for g in groups]
        refs, cands, where = _pair_lists(groups)
        if not refs:
            return [np.eye(len(g)) for g in groups]
        # One call: bert-score encodes each distinct sentence once, then matches pairs in batches.
        _, _, f1 = self.scorer.score(cands, refs, batch_size=self.batch_size)
        return _fill_symmetric(groups, where, f1.numpy().astype(np.float64))

    def release(self):
        if self.shared:
            self.encoder.clear_cache()

    def describe(self):
        return {"name": self.name, "model": self.model_name, "num_layers": self.num_layers,
                "implementation": "shared-encoder" if self.shared else "bert_score.BERTScorer"}


@SIMILARITIES.register("rouge_l")
class RougeLSimilarity(PairwiseSimilarity):
    """ROUGE-L F-measure (rouge-score tokenizer, Porter stemmer on); symmetric."""

    name = "rouge_l"

    def __init__(self):
        self._tokenize = lexical.rouge_tokenizer()

    def _prepare(self, text: str) -> lexical.RougeText:
        return lexical.RougeText(self._tokenize(text))

    def pair(self, reference: str, candidate: str) -> float:
        return lexical.rouge_l_f(self._prepare(reference), self._prepare(candidate))

    def matrices(self, groups, contexts=None):
        unique, index = _unique_index(groups)
        prepared = [self._prepare(t) for t in unique]  # tokenize and stem each distinct text once
        mats = []
        for ix in index:
            n = len(ix)
            s = np.eye(n)
            for i in range(n):
                for j in range(i + 1, n):
                    s[i, j] = s[j, i] = lexical.rouge_l_f(prepared[ix[i]], prepared[ix[j]])
            mats.append(s)
        return mats


@SIMILARITIES.register("bleu")
class BleuSimilarity(PairwiseSimilarity):
    """NLTK sentence BLEU, whitespace tokens, smoothing method1. Asymmetric: S[i, j] uses i as reference."""

    name = "bleu"
    symmetric = False

    def pair(self, reference: str, candidate: str) -> float:
        return lexical.bleu(lexical.BleuText(reference), lexical.BleuText(candidate))

    def matrices(self, groups, contexts=None):
        unique, index = _unique_index(groups)
        prepared = [lexical.BleuText(t) for t in unique]  # n-gram counts once per distinct text
        mats = []
        for ix in index:
            n = len(ix)
            s = np.eye(n)
            for i in range(n):
                for j in range(n):
                    if i != j:
                        s[i, j] = lexical.bleu(prepared[ix[i]], prepared[ix[j]])
            mats.append(s)
        return mats


@dataclass(frozen=True)
class SimilarityOptions:
    """The run's model choices; each similarity takes what it needs in `from_options`."""

    embedder: str | None = None
    bertscore_model: str | None = None  # default: the embedder
    bertscore_layers: int | None = None  # default: all layers of that model
    device: str | None = None
    encoder_backend: str = "torch"  # torch, or onnx (ONNX Runtime; the `onnx` extra)
    nli_model: str | None = None  # HF sequence-classification NLI model (id in the local cache or path)
    nli_edge: str = "entail"  # entail: mean bidirectional P(entailment); not-contradict: 1 - max P(contradiction);
    # graded: mean bidirectional P(entailment) + 0.5 P(neutral)
    nli_batch_size: int = 32
    nli_question: bool = True  # NLI inputs "{question} {answer}" when the question is known
    judge_model: str | None = None  # any generation model (alias, HF id, path, API name)
    judge_backend: str | None = None  # default: the model's registry entry
    judge_base_urls: tuple[str, ...] = ()  # OpenAI-compatible endpoints for the judge
    judge_batch_size: int = 16
    cache_path: str | None = None  # generation cache for judge calls (default: $SAGE_CACHE_DIR)


def build_similarity(name: str, options: SimilarityOptions | None = None) -> PairwiseSimilarity:
    """Build a similarity from its registry name with the run's model choices."""
    cls = SIMILARITIES.get(name)
    log.info("building similarity %s", name)
    return cls.from_options(options or SimilarityOptions())
