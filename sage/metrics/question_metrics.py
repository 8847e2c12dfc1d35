"""Per-question metrics: what `sage score` computes from one question's graph.

Each metric names the similarities it needs and turns one question's matrices (and, for metrics
that judge meaning, its entailment relations) into columns of questions.csv. Adding a metric is
one class and one `@QUESTION_METRICS.register` line; `sage.scoring` loops over the chosen ones.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from sage.api import EntailmentRelations
from sage.errors import SageInputError
from sage.metrics import graph_measures as gm
from sage.metrics.semantic_entropy import (
    cluster_ids,
    discrete_semantic_entropy,
    equivalence_matrix,
    weighted_semantic_entropy,
)
from sage.metrics.sge import UNDEFINED, distances_from_similarity, sge_from_distances
from sage.metrics.similarity import SIMILARITIES, upper_mean
from sage.registry import Registry

BASELINES = ("bleu", "rouge_l", "bertscore", "cosine")
LABELS = {"sge": "SGE", "se": "SE", "bleu": "BLEU", "rouge_l": "ROUGE-L", "bertscore": "BERTScore",
          "cosine": "Cosine", "num_sets": "NumSets", "eigv": "EigV", "degree": "Degree",
          "eccentricity": "Ecc", "kle": "KLE"}
# Another name for a metric sage already computes: the same columns, computed once.
# lexsim: LM-Polygraph's LexicalSimilarity (rougeL), the mean pairwise ROUGE-L F (it reports minus that).
METRIC_ALIASES = {"lexsim": "rouge_l"}


@dataclass
class QuestionView:
    """One question's nodes on one text column (`col`: answer or rot)."""

    col: str
    texts: list[str]
    sims: dict[str, np.ndarray]  # similarity name -> n x n matrix
    relations: dict[str, EntailmentRelations] = field(default_factory=dict)
    frame: Any = None  # the question's rows of the responses table (pandas.DataFrame)

    def defined(self, edge: str) -> bool:
        """Whether `edge` gives this question a graph (a column edge may not cover its texts)."""
        return self.sims.get(edge) is not None and len(self.texts) > 1


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

    def edge_columns(self, cfg: dict, col: str) -> dict[str, str]:
        """Column -> the edge similarity (an edges.csv column) it is computed from; `cfg` as above."""
        return {}


QUESTION_METRICS: Registry[type[QuestionMetric]] = Registry("metric")


def edge_column(edge: str, primary: str, col: str, part: str) -> str:
    """`<part>_<col>` for the primary edge similarity, `<part>_<edge>_<col>` for the others."""
    return f"{part}_{col}" if edge == primary else f"{part}_{edge.removeprefix(COLUMN_EDGE)}_{col}"


def _override_texts(edge: str, view) -> Sequence[str] | None:
    """The texts whose identical pairs get distance 0: only for computed edges. A pair file's
    column keeps the user's own values (issue 58 item 4)."""
    return None if edge.startswith(COLUMN_EDGE) else view.texts


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
            res = (sge_from_distances(distances_from_similarity(view.sims[edge], _override_texts(edge, view)))
                   if view.defined(edge) else UNDEFINED)
            for part, value in (("sge", res.sge), ("D", res.D), ("H", res.H), ("meansim", res.mean_similarity)):
                out[edge_column(edge, primary, view.col, part)] = value
        return out

    def headline(self, cfg, col):
        edges = cfg["sge_edges"]
        return [(edge_column(e, edges[0], col, "sge"), f"SGE{'' if e == edges[0] else '/' + e} ({col})") for e in edges]

    def edge_columns(self, cfg, col):
        edges = cfg["sge_edges"]
        return {edge_column(e, edges[0], col, part): e for e in edges for part in ("sge", "D", "H", "meansim")}


class GraphMeasure(QuestionMetric):
    """One value per edge similarity of `sge_edges` from the graph's weights W
    (`sage.metrics.graph_measures`): `<name>_<col>` for the first edge, `<name>_<edge>_<col>`."""

    def similarities(self, config):
        return list(config.sge_edges)

    @abstractmethod
    def value(self, config, w: np.ndarray, view: QuestionView, edge: str) -> float: ...

    def columns(self, config, view):
        primary = config.sge_edges[0]
        return {edge_column(edge, primary, view.col, self.name):
                self.value(config, gm.affinity(view.sims[edge], _override_texts(edge, view)), view, edge)
                if view.defined(edge) else float("nan") for edge in config.sge_edges}

    def headline(self, cfg, col):
        edges = cfg["sge_edges"]
        return [(edge_column(e, edges[0], col, self.name), f"{LABELS[self.name]}{'' if e == edges[0] else '/' + e} ({col})")
                for e in edges]

    def edge_columns(self, cfg, col):
        edges = cfg["sge_edges"]
        return {edge_column(e, edges[0], col, self.name): e for e in edges}


@QUESTION_METRICS.register("num_sets")
class NumSetsMeasure(GraphMeasure):
    """NumSemSets: entailment-judging edges join nodes that agree both ways, others W > threshold."""

    name = "num_sets"

    def value(self, config, w, view, edge):
        rel = view.relations.get(edge)
        return float(gm.num_sets(rel.agrees if rel is not None else w > config.graph.num_sets_threshold))


@QUESTION_METRICS.register("eigv")
class EigVMeasure(GraphMeasure):
    name = "eigv"

    def value(self, config, w, view, edge):
        return gm.eigv(w)


@QUESTION_METRICS.register("degree")
class DegreeMeasure(GraphMeasure):
    name = "degree"

    def value(self, config, w, view, edge):
        return gm.degree(w)


@QUESTION_METRICS.register("eccentricity")
class EccentricityMeasure(GraphMeasure):
    name = "eccentricity"

    def value(self, config, w, view, edge):
        return gm.eccentricity(w, config.graph.eccentricity_threshold)


@QUESTION_METRICS.register("kle")
class KLEMeasure(GraphMeasure):
    name = "kle"

    def value(self, config, w, view, edge):
        return gm.kle(w, config.graph)


class BaselineMetric(QuestionMetric):
    """Mean similarity over the C(n, 2) pairs i < j."""

    def similarities(self, config):
        return [self.name]

    def columns(self, config, view):
        return {f"{self.name}_{view.col}": upper_mean(view.sims[self.name])}

    def headline(self, cfg, col):
        return [(f"{self.name}_{col}", f"{LABELS[self.name]} ({col})")]

    def edge_columns(self, cfg, col):
        return {f"{self.name}_{col}": self.name}


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
    """Semantic entropy from equivalence clusters (`sage.metrics.semantic_entropy`): equivalence
    by `config.se_equivalence` (loose or strict), clusters by `config.se_clustering`.

    Columns per equivalence edge: `se_<col>` (discrete), `n_clusters_<col>`, and
    `se_weighted_<col>` when the responses carry `<col>_logprob_sampled` (the log-probability
    under the distribution the answer was sampled from, as the reference uses) or else
    `<col>_logprob`; length-normalised by `<col>_tokens` when present.
    """

    name = "se"

    def check(self, config):
        if not equivalence_edges(config):
            raise SageInputError("metric se clusters answers by bidirectional entailment: add nli or judge to "
                                 "--sge-edges (with --nli-model or --judge-model)")

    def similarities(self, config):
        return equivalence_edges(config)

    def columns(self, config, view):
        edges = equivalence_edges(config)
        ll = _log_likelihoods(view)
        out = {}
        for edge in edges:
            ids = (cluster_ids(equivalence_matrix(view.relations[edge].labels, config.se_equivalence),
                               config.se_clustering) if len(view.texts) > 1 else None)
            nan = float("nan")
            out[edge_column(edge, edges[0], view.col, "se")] = discrete_semantic_entropy(ids) if ids is not None else nan
            out[edge_column(edge, edges[0], view.col, "n_clusters")] = float(ids.max() + 1) if ids is not None else nan
            if ll is not None:
                out[edge_column(edge, edges[0], view.col, "se_weighted")] = (
                    weighted_semantic_entropy(ids, ll) if ids is not None else nan)
        return out

    def headline(self, cfg, col):
        edges = [e for e in cfg["sge_edges"] if not is_column_edge(e) and SIMILARITIES.get(e).judges_equivalence]
        out = []
        for e in edges:
            suffix = "" if e == edges[0] else f"/{e}"
            out += [(edge_column(e, edges[0], col, "se"), f"SE{suffix} ({col})"),
                    (edge_column(e, edges[0], col, "n_clusters"), f"clusters{suffix} ({col})")]
        return out

    def edge_columns(self, cfg, col):
        edges = [e for e in cfg["sge_edges"] if not is_column_edge(e) and SIMILARITIES.get(e).judges_equivalence]
        return {edge_column(e, edges[0], col, part): e for e in edges for part in ("se", "n_clusters", "se_weighted")}


def measure_edges(cfg: dict) -> dict[str, str]:
    """Every questions.csv column a run's metrics write -> the edge similarity it is computed from
    (`cfg`: summary.json's config), so a measure can be shown next to its edges' pair-level validity."""
    return {c: e for col in cfg.get("on", ()) for m in cfg.get("metrics", ())
            for c, e in QUESTION_METRICS.get(METRIC_ALIASES.get(m, m))().edge_columns(cfg, col).items()}


def _log_likelihoods(view: QuestionView) -> np.ndarray | None:
    """Each node's log-likelihood for weighted SE: the sampled distribution's log-prob when recorded
    (else the model's), divided by the token count when known."""
    frame = view.frame
    if frame is None:
        return None
    lp_col = next((c for c in (f"{view.col}_logprob_sampled", f"{view.col}_logprob") if c in frame.columns), None)
    if lp_col is None:
        return None
    lp = frame[lp_col].to_numpy(dtype=float)
    tok_col = f"{view.col}_tokens"
    if tok_col in frame.columns:
        tokens = frame[tok_col].to_numpy(dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            lp = np.where(tokens > 0, lp / tokens, np.nan)
    return lp
