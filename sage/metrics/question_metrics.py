"""Per-question metrics: what `sage score` computes from one question's graph.

Each metric names the similarities it needs and turns one question's matrices (and, for metrics
that judge meaning, its entailment relations) into columns of questions.csv. Adding a metric is
one class and one `@QUESTION_METRICS.register` line; `sage.scoring` loops over the chosen ones.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sage.api import EntailmentRelations
from sage.errors import SageInputError
from sage.metrics.sge import UNDEFINED, distances_from_similarity, sge_from_distances
from sage.metrics.similarity import SIMILARITIES, upper_mean
from sage.registry import Registry

BASELINES = ("bleu", "rouge_l", "bertscore", "cosine")
LABELS = {"sge": "SGE", "se": "SE", "bleu": "BLEU", "rouge_l": "ROUGE-L", "bertscore": "BERTScore",
          "cosine": "Cosine"}


@dataclass
class QuestionView:
    """One question's nodes on one text column (`col`: answer or rot)."""

    col: str
    texts: list[str]
    sims: dict[str, np.ndarray]  # similarity name -> n x n matrix
    relations: dict[str, EntailmentRelations] = field(default_factory=dict)
    frame: Any = None  # the question's rows of the responses table (pandas.DataFrame)


class QuestionMetric(ABC):
    name: str = ""

    def check(self, config) -> None:
        """Raise SageInputError when `config` cannot give this metric."""

    @abstractmethod
    def similarities(self, config) -> list[str]: ...

    @abstractmethod
    def columns(self, config, view: QuestionView) -> dict[str, float]: ...

    @abstractmethod
    def headline(self, cfg: dict, col: str) -> list[tuple[str, str]]:
        """(column, label) pairs for the summary table; `cfg` is the summary's config dict."""


QUESTION_METRICS: Registry[type[QuestionMetric]] = Registry("metric")


def edge_column(edge: str, primary: str, col: str, part: str) -> str:
    """`<part>_<col>` for the primary edge similarity, `<part>_<edge>_<col>` for the others."""
    return f"{part}_{col}" if edge == primary else f"{part}_{edge.removeprefix(COLUMN_EDGE)}_{col}"


COLUMN_EDGE = "column:"  # --sge-edges column:NAME: similarities read from a pair-layout file's column
_COLUMN_TARGETS = {"_model_output": "answer", "_answer": "answer", "_rot": "rot"}


def is_column_edge(edge: str) -> bool:
    return edge.startswith(COLUMN_EDGE)


def column_edge_applies(edge: str, col: str) -> bool:
    """A pair column names the texts it compares by its suffix (the authors' `cosine_model_output`
    compares answers, `cosine_rot` RoTs); a column without such a suffix applies to every text."""
    name = edge.removeprefix(COLUMN_EDGE)
    target = next((t for suffix, t in _COLUMN_TARGETS.items() if name.endswith(suffix)), None)
    return target is None or target == col


@QUESTION_METRICS.register("sge")
class SGEMetric(QuestionMetric):
    """SGE over every edge similarity of `sge_edges` with its D, H and mean similarity."""

    name = "sge"

    def similarities(self, config):
        return list(config.sge_edges)

    def columns(self, config, view):
        out = {}
        primary = config.sge_edges[0]
        for edge in config.sge_edges:
            mat = view.sims[edge]  # None: a column edge that does not cover these texts
            res = (sge_from_distances(distances_from_similarity(mat, view.texts))
                   if mat is not None and mat.shape[0] > 1 else UNDEFINED)
            for part, value in (("sge", res.sge), ("D", res.D), ("H", res.H), ("meansim", res.mean_similarity)):
                out[edge_column(edge, primary, view.col, part)] = value
        return out

    def headline(self, cfg, col):
        edges = cfg["sge_edges"]
        return [(edge_column(e, edges[0], col, "sge"), f"SGE{'' if e == edges[0] else '/' + e} ({col})") for e in edges]


class BaselineMetric(QuestionMetric):
    """Mean similarity over the C(n, 2) pairs i < j."""

    def similarities(self, config):
        return [self.name]

    def columns(self, config, view):
        return {f"{self.name}_{view.col}": upper_mean(view.sims[self.name])}

    def headline(self, cfg, col):
        return [(f"{self.name}_{col}", f"{LABELS[self.name]} ({col})")]


@QUESTION_METRICS.register("bleu")
class BleuBaseline(BaselineMetric):
    name = "bleu"


@QUESTION_METRICS.register("rouge_l")
class RougeLBaseline(BaselineMetric):
    name = "rouge_l"


@QUESTION_METRICS.register("bertscore")
class BertScoreBaseline(BaselineMetric):
    name = "bertscore"


@QUESTION_METRICS.register("cosine")
class CosineBaseline(BaselineMetric):
    name = "cosine"


def equivalence_edges(config) -> list[str]:
    """The edge similarities of `sge_edges` that judge equivalence of meaning (nli, judge)."""
    return [e for e in config.sge_edges if not is_column_edge(e) and SIMILARITIES.get(e).judges_equivalence]


@QUESTION_METRICS.register("se")
class SemanticEntropyMetric(QuestionMetric):
    """Semantic entropy from bidirectional-entailment clusters (`sage.metrics.semantic_entropy`).

    Columns per equivalence edge: `se_<col>` (discrete), `n_clusters_<col>`, and
    `se_weighted_<col>` when the responses carry `<col>_logprob` (length-normalised by
    `<col>_tokens` when present).
    """

    name = "se"

    def check(self, config):
        if not equivalence_edges(config):
            raise SageInputError("metric se clusters answers by bidirectional entailment: add nli or judge to "
                                 "--sge-edges (with --nli-model or --judge-model)")

    def similarities(self, config):
        return equivalence_edges(config)

    def columns(self, config, view):
        from sage.metrics.semantic_entropy import (
            cluster_ids,
            discrete_semantic_entropy,
            weighted_semantic_entropy,
        )

        edges = equivalence_edges(config)
        ll = _log_likelihoods(view)
        out = {}
        for edge in edges:
            n = len(view.texts)
            ids = cluster_ids(view.relations[edge].equivalent) if n > 1 else None
            out[edge_column(edge, edges[0], view.col, "se")] = discrete_semantic_entropy(ids) if n > 1 else float("nan")
            out[edge_column(edge, edges[0], view.col, "n_clusters")] = float(ids.max() + 1) if n > 1 else float("nan")
            if ll is not None:
                out[edge_column(edge, edges[0], view.col, "se_weighted")] = (
                    weighted_semantic_entropy(ids, ll) if n > 1 else float("nan"))
        return out

    def headline(self, cfg, col):
        edges = [e for e in cfg["sge_edges"] if not is_column_edge(e) and SIMILARITIES.get(e).judges_equivalence]
        out = []
        for e in edges:
            suffix = "" if e == edges[0] else f"/{e}"
            out += [(edge_column(e, edges[0], col, "se"), f"SE{suffix} ({col})"),
                    (edge_column(e, edges[0], col, "n_clusters"), f"clusters{suffix} ({col})")]
        return out


def _log_likelihoods(view: QuestionView) -> np.ndarray | None:
    """Each node's log-likelihood for weighted SE: mean token log-prob, else the summed log-prob."""
    frame = view.frame
    lp_col, tok_col = f"{view.col}_logprob", f"{view.col}_tokens"
    if frame is None or lp_col not in frame.columns:
        return None
    lp = frame[lp_col].to_numpy(dtype=float)
    if tok_col in frame.columns:
        tokens = frame[tok_col].to_numpy(dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            lp = np.where(tokens > 0, lp / tokens, np.nan)
    return lp
