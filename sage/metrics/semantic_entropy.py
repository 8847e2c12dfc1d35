"""Semantic entropy (Kuhn, Gal & Farquhar, ICLR 2023; Farquhar, Kossen, Kuhn & Gal, Nature 2024).

Clustering: nodes are taken in order; node i joins the cluster of the first earlier node j with
which it is *bidirectionally* equivalent (j entails i and i entails j), otherwise it starts a new
cluster (Kuhn et al.'s greedy algorithm, strict bidirectional entailment).

- Discrete semantic entropy (Farquhar et al.'s estimator for when likelihoods are unavailable):
  `SE = -sum_c (n_c / n) ln(n_c / n)` over clusters c with n_c of the n nodes. One cluster gives 0,
  n singletons ln n.
- Likelihood-weighted semantic entropy (Farquhar et al.'s Rao estimator over the sampled
  answers): with l_s each node's log-likelihood, `p_c = sum_{s in c} exp(l_s) / sum_s exp(l_s)` and
  `SE = -sum_c p_c ln p_c`. The caller chooses l_s; `sage` uses the length-normalised sequence
  log-probability (mean token log-probability, Farquhar et al.'s default) when token counts are
  known, the summed log-probability otherwise.
"""
from __future__ import annotations

import numpy as np


def cluster_ids(equivalent: np.ndarray) -> np.ndarray:
    """Cluster index of each node from an n x n boolean matrix of bidirectional equivalence."""
    eq = np.asarray(equivalent, dtype=bool)
    n = eq.shape[0]
    ids = np.full(n, -1, dtype=np.int64)
    next_id = 0
    for i in range(n):
        for j in range(i):
            if eq[i, j] and eq[j, i]:
                ids[i] = ids[j]
                break
        else:
            ids[i] = next_id
            next_id += 1
    return ids


def _entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def discrete_semantic_entropy(ids: np.ndarray) -> float:
    """Entropy (nats) of the cluster frequencies."""
    ids = np.asarray(ids)
    if ids.size == 0:
        return float("nan")
    _, counts = np.unique(ids, return_counts=True)
    return _entropy(counts / ids.size)


def weighted_semantic_entropy(ids: np.ndarray, log_likelihoods: np.ndarray) -> float:
    """Entropy (nats) of cluster probabilities from the nodes' normalised likelihoods."""
    ids = np.asarray(ids)
    ll = np.asarray(log_likelihoods, dtype=np.float64)
    if ids.size == 0 or not np.all(np.isfinite(ll)):
        return float("nan")
    w = np.exp(ll - ll.max())
    w /= w.sum()
    return _entropy(np.array([w[ids == c].sum() for c in np.unique(ids)]))
