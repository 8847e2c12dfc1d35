"""Semantic Graph Entropy.

    SGE = 1 - D(G) * H(p),  p(v_i) = f(v_i) / sum_j f(v_j),  f(v_i) = sum_u d(v_i, u)

D(G) is the mean distance over ordered pairs i != j, d the edge distance (cosine distance by
default), H the Shannon entropy in nats. Nodes are rows, not unique strings: identical answers
are separate nodes at distance 0.

Degenerate graphs:
- one node: SGE is undefined (NaN, `defined=False`); callers exclude it from aggregates and count it.
- all distances zero (identical answers): D(G) = 0 so SGE = 1. p is 0/0 there; we report H as
  log(n), the entropy of the uniform distribution that equal (vanishing) distances tend to.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class SGEResult:
    sge: float
    D: float
    H: float
    mean_similarity: float
    n: int

    @property
    def defined(self) -> bool:
        return self.n >= 2


UNDEFINED = SGEResult(sge=float("nan"), D=float("nan"), H=float("nan"), mean_similarity=float("nan"), n=1)


def require_finite(matrix: np.ndarray, what: str) -> np.ndarray:
    """`matrix` as float64; ValueError naming the first NaN or infinite entry (a NaN would otherwise
    pass silently into SGE or become numpy's LinAlgError in an eigen-decomposition)."""
    m = np.asarray(matrix, dtype=np.float64)
    bad = np.argwhere(~np.isfinite(m))
    if bad.size:
        raise ValueError(f"{what} has a non-finite entry {m[tuple(bad[0])]} at {tuple(int(i) for i in bad[0])}; "
                         f"every pair value must be a finite number")
    return m


def sge_from_distances(dist: np.ndarray) -> SGEResult:
    """SGE of the complete graph whose edge weights are the n x n distance matrix `dist`.

    Range: for distances in [0, 1], SGE lies in [1 - ln n, 1]; all-unrelated answers (d = 1 off the
    diagonal) give 1 - ln n (-0.609 for n = 5), identical answers give 1. Cosine distances of n unit
    vectors average at most n/(n-1), so over them SGE >= 1 - n ln n / (n-1) (a regular simplex).
    """
    dist = require_finite(dist, "distance matrix")
    if dist.ndim != 2 or dist.shape[0] != dist.shape[1]:
        raise ValueError(f"distance matrix must be square, got shape {dist.shape}")
    n = dist.shape[0]
    if n < 2:
        return SGEResult(float("nan"), float("nan"), float("nan"), float("nan"), n)
    off = ~np.eye(n, dtype=bool)
    d = np.where(off, dist, 0.0)
    D = float(d.sum() / (n * (n - 1)))
    f = d.sum(axis=1)
    total = f.sum()
    if total <= 0.0:
        H = float(np.log(n))
    else:
        p = f / total
        nz = p > 0
        H = float(-(p[nz] * np.log(p[nz])).sum())
    return SGEResult(sge=1.0 - D * H, D=D, H=H, mean_similarity=1.0 - D, n=n)


def distances_from_similarity(sim: np.ndarray, texts: Sequence[str] | None = None) -> np.ndarray:
    """d = 1 - sim, symmetrised ((S + S^T) / 2) for asymmetric similarities such as BLEU.

    With `texts`, identical texts get distance 0 whatever the similarity says (BLEU of two
    identical three-word answers is below 1 because they have no 4-grams).
    """
    sim = require_finite(sim, "similarity matrix")
    sym = (sim + sim.T) / 2.0
    d = 1.0 - sym
    if texts is not None:
        arr = np.asarray(texts, dtype=object)
        d[arr[:, None] == arr[None, :]] = 0.0
    np.fill_diagonal(d, 0.0)
    # Float noise can make cosine similarity of equal vectors exceed 1 by ~1e-7.
    return np.clip(d, 0.0, None)


def cosine_distances(embeddings: np.ndarray) -> np.ndarray:
    e = np.asarray(embeddings, dtype=np.float64)
    norms = np.linalg.norm(e, axis=1, keepdims=True)
    e = e / np.where(norms == 0, 1.0, norms)
    return distances_from_similarity(e @ e.T)


def build_graph(texts: Sequence[str], dist: np.ndarray):
    """The question's semantic graph as a networkx.Graph (for inspection and drawing).

    Node attributes: `text`; edge attribute `distance`. Computations use numpy, not this graph.
    """
    import networkx as nx

    g = nx.Graph()
    n = len(texts)
    for i, t in enumerate(texts):
        g.add_node(i, text=t)
    for i in range(n):
        for j in range(i + 1, n):
            g.add_edge(i, j, distance=float(dist[i, j]))
    return g


def sge_from_graph(g) -> SGEResult:
    """SGE from a networkx graph with `distance` edge attributes (missing edges count as 0)."""
    import networkx as nx

    nodes = list(g.nodes)
    return sge_from_distances(nx.to_numpy_array(g, nodelist=nodes, weight="distance"))
