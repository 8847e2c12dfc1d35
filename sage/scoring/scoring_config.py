"""What a scoring run computes: the metrics, text columns, edge similarities and their options."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sage.errors import SageInputError
from sage.metrics.graph_measures import GraphOptions
from sage.metrics.question_metrics import (
    BASELINES,
    LABELS,
    METRIC_ALIASES,
    QUESTION_METRICS,
    edge_column,
    is_column_edge,
)
from sage.metrics.semantic_entropy import CLUSTERING_RULES, EQUIVALENCE_RULES
from sage.metrics.similarity import SIMILARITIES, SimilarityOptions

log = logging.getLogger(__name__)

METRICS = ("sge",) + BASELINES  # the default; every name in QUESTION_METRICS (e.g. "se") can be chosen
METRIC_LABELS = LABELS


@dataclass(frozen=True)
class ScoreConfig:
    metrics: tuple[str, ...] = METRICS
    on: tuple[str, ...] | None = None  # None: answer, plus rot when the table has RoTs
    sge_edges: tuple[str, ...] = ("cosine",)  # the first names the plain sge_<col> columns
    similarity: SimilarityOptions = field(default_factory=SimilarityOptions)
    graph: GraphOptions = field(default_factory=GraphOptions)  # num_sets, eigv, degree, eccentricity, kle
    se_equivalence: str = "loose"  # semantic entropy: loose or strict (sage.metrics.semantic_entropy)
    se_clustering: str = "reference"  # reference (get_semantic_ids), first-member, chain
    skip_invalid: bool = False
    chunk_questions: int = 100  # questions scored together: memory is bounded by the chunk, not the table
    n_boot: int = 2000
    seed: int = 0

    def __post_init__(self):
        # Aliases name a metric sage already computes (lexsim = rouge_l): one entry, computed once.
        object.__setattr__(self, "metrics", tuple(dict.fromkeys(METRIC_ALIASES.get(m, m) for m in self.metrics)))
        for m in self.metrics:
            QUESTION_METRICS.get(m)  # one-line error naming the choices
        if self.se_equivalence not in EQUIVALENCE_RULES:
            raise SageInputError(f"unknown --se-equivalence {self.se_equivalence!r}; choose {' or '.join(EQUIVALENCE_RULES)}")
        if self.se_clustering not in CLUSTERING_RULES:
            raise SageInputError(f"unknown --se-clustering {self.se_clustering!r}; choose one of "
                                 f"{', '.join(CLUSTERING_RULES)}")
        for e in self.sge_edges:
            if e not in SIMILARITIES and not is_column_edge(e):
                raise SageInputError(f"unknown SGE edge similarity {e!r}; choose from "
                                     f"{', '.join(SIMILARITIES.names())} or column:NAME (a pair-layout file's column)")
        if not self.metrics:
            raise SageInputError("no metrics selected; pass at least one of " + ", ".join(METRICS))
        if self.chunk_questions < 1:
            raise SageInputError("chunk_questions must be >= 1")
        if not self.sge_edges:
            raise SageInputError("no SGE edge similarity selected; pass e.g. --sge-edges cosine")
        for c in self.on or ():
            if c not in ("answer", "rot"):
                raise SageInputError(f"unknown text column {c!r} for --on; choose answer and/or rot")
        for metric in self.question_metrics():
            metric.check(self)

    def question_metrics(self):
        return [QUESTION_METRICS.get(m)() for m in self.metrics]

    def needed_similarities(self) -> list[str]:
        """Similarities to build (column edges are read from the file, not computed)."""
        return list(dict.fromkeys(n for m in self.question_metrics() for n in m.similarities(self)
                                  if not is_column_edge(n)))

    def column_edges(self) -> list[str]:
        """Column edges some chosen metric reads (SGE and the graph measures use every edge)."""
        return list(dict.fromkeys(n for m in self.question_metrics() for n in m.similarities(self)
                                  if is_column_edge(n)))


def sge_column(edge: str, primary: str, col: str, part: str = "sge") -> str:
    return edge_column(edge, primary, col, part)


