"""Reference-free ParaScore, computed locally on `bert-score`.

    ParaScore(x, c) = BERTScore_F1(x, c) + omega * DS(x, c),  omega = 0.05
    DS(x, c) = gamma                         if d >= gamma
             = -1 + (gamma + 1) / gamma * d  otherwise,        gamma = 0.35
    d = character edit distance(x, c) / max(len(x), len(c))

(Shen et al., 2022). The `parascore` PyPI package (1.0.5) computes the same thing in
`base_score(cands, sources, refs=sources)`; its `free_score` zips the (P, R, F) tuple with the
diversity list and so returns three wrong numbers, which is why this module exists.

Threshold: the SaGE paper keeps paraphrases with ParaScore >= 0.8 (our default); the authors'
released code used 0.6. Either is one option away (`--min-parascore`).
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from sage.models.resolve import bundled_embedder_path, resolve_model_path

log = logging.getLogger(__name__)

DEFAULT_THRESHOLD = 0.8  # SaGE paper; the authors' code used 0.6
OMEGA = 0.05
GAMMA = 0.35

_SCORERS: dict[tuple, object] = {}
_LOCK = threading.Lock()


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance over characters (insert, delete, substitute cost 1)."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def diversity(source: str, candidate: str, gamma: float = GAMMA) -> float:
    longest = max(len(source), len(candidate))
    d = edit_distance(source, candidate) / longest if longest else 0.0
    return gamma if d >= gamma else -1.0 + (gamma + 1.0) / gamma * d


@dataclass(frozen=True)
class ParaScoreResult:
    similarity: float
    diversity: float
    score: float


class ParaScorer:
    """BERTScore-based ParaScore with an encoder loaded once per (path, layers, device)."""

    def __init__(
        self,
        model_path: str | Path | None = None,
        num_layers: int = 6,
        device: str = "cpu",
        batch_size: int = 64,
        omega: float = OMEGA,
        gamma: float = GAMMA,
    ):
        self.model_path = str(
            resolve_model_path(str(model_path), what="ParaScore encoder") if model_path else bundled_embedder_path()
        )
        self.num_layers, self.device, self.batch_size = num_layers, device, batch_size
        self.omega, self.gamma = omega, gamma

    def _scorer(self):
        key = (self.model_path, self.num_layers, self.device)
        with _LOCK:
            if key not in _SCORERS:
                from bert_score import BERTScorer

                log.info("loading ParaScore encoder %s (%d layers)", self.model_path, self.num_layers)
                _SCORERS[key] = BERTScorer(
                    model_type=self.model_path,
                    num_layers=self.num_layers,
                    device=self.device,
                    batch_size=self.batch_size,
                )
            return _SCORERS[key]

    def similarity(self, sources: Sequence[str], candidates: Sequence[str]) -> list[float]:
        if not candidates:
            return []
        _, _, f1 = self._scorer().score(list(candidates), list(sources))
        return [float(x) for x in f1]

    def score(self, sources: Sequence[str], candidates: Sequence[str]) -> list[ParaScoreResult]:
        sims = self.similarity(sources, candidates)
        out = []
        for src, cand, sim in zip(sources, candidates, sims):
            div = diversity(src, cand, self.gamma)
            out.append(ParaScoreResult(similarity=sim, diversity=div, score=sim + self.omega * div))
        return out

    def describe(self) -> dict:
        return {"encoder": self.model_path, "num_layers": self.num_layers, "omega": self.omega, "gamma": self.gamma}
