"""Semantic entropy (Kuhn, Gal & Farquhar, ICLR 2023; Farquhar, Kossen, Kuhn & Gal, Nature 2024).

Reference implementation: jlko/semantic_uncertainty,
`semantic_uncertainty/uncertainty/uncertainty_measures/semantic_entropy.py` (Farquhar et al.'s
released code): `get_semantic_ids`, `cluster_assignment_entropy`, `logsumexp_by_id` and
`predictive_entropy_rao`. Each function here names the part it follows.

Equivalence of two answers (`equivalence_matrix`) from the 3-way NLI labels of both directions,
as in `get_semantic_ids.are_equivalent`:
- `loose` (the default; `get_semantic_ids(strict_entailment=False)`, the function's default
  argument): neither direction is a contradiction and not both are neutral;
- `strict` (`strict_entailment=True`): both directions are entailment. The released pipeline's
  command line (`uncertainty/utils/utils.py`, `--strict_entailment`) defaults to True, so the
  Nature paper's runs used this rule;
- Kuhn et al.'s released code (lorenzkuhn/semantic_uncertainty, `code/get_semantic_similarities.py`)
  used "no contradiction in either direction" (neutral both ways counts as equivalent), which is
  neither of the two; it is not offered here.
With a binary judge (the LLM judge: yes = entailment, no = contradiction) the two rules agree.

Clustering (`cluster_ids`, `rule`):
- `reference` (default): `get_semantic_ids`. Nodes are visited in order; a node without a
  cluster starts one and then *every* later node equivalent to it is put into that cluster, even
  one already placed in an earlier cluster. So the representatives are the nodes equivalent to no
  earlier representative, and every other node ends in the cluster of the *last* earlier
  representative it is equivalent to. Non-transitive judgments do not chain: A~B, B~C, A!~C gives
  {A, B}, {C} (SE 0.637), not one cluster.
- `first-member`: Kuhn et al.'s Algorithm 1 as printed in the paper: a node joins the first
  existing cluster whose *first member* it is equivalent to, else starts a new one. Same
  representatives as `reference`; it differs only where a node is equivalent to two
  representatives (here the first wins, in the reference the last).
- `chain`: sage's earlier rule (kept to reproduce runs scored before issue 33): a node joins the cluster
  of the first earlier node of any cluster it is equivalent to, so clusters chain through
  non-transitive judgments (A~B, B~C, A!~C gives one cluster, SE 0).

Estimators:
- Discrete semantic entropy (`cluster_assignment_entropy`): `-sum_c (n_c/n) ln(n_c/n)`.
- Likelihood-weighted semantic entropy (`logsumexp_by_id(agg="sum_normalized")` then
  `predictive_entropy_rao`): with l_s each node's log-likelihood,
  `p_c = sum_{s in c} exp(l_s) / sum_s exp(l_s)` and `SE = -sum_c p_c ln p_c`. The reference takes
  l_s as the mean token log-likelihood of the distribution the answer was sampled from
  (`compute_transition_scores(..., normalize_logits=True)` over the warped scores); `sage` uses
  `<col>_logprob_sampled / <col>_tokens` when the responses carry it (see `QuestionView`).
"""
from __future__ import annotations

import numpy as np

ENTAILMENT, NEUTRAL, CONTRADICTION = 0, 1, 2  # label codes of `EntailmentRelations.labels`
EQUIVALENCE_RULES = ("loose", "strict")
CLUSTERING_RULES = ("reference", "first-member", "chain")


def equivalence_matrix(labels: np.ndarray, rule: str = "loose") -> np.ndarray:
    """n x n symmetric boolean equivalence from directional labels (`labels[i, j]`: premise i,
    hypothesis j; codes ENTAILMENT/NEUTRAL/CONTRADICTION), by the reference's `are_equivalent`."""
    lab = np.asarray(labels)
    fwd, bwd = lab, lab.T
    if rule == "strict":
        eq = (fwd == ENTAILMENT) & (bwd == ENTAILMENT)
    elif rule == "loose":
        eq = (fwd != CONTRADICTION) & (bwd != CONTRADICTION) & ~((fwd == NEUTRAL) & (bwd == NEUTRAL))
    else:
        raise ValueError(f"unknown equivalence rule {rule!r}; choose one of {', '.join(EQUIVALENCE_RULES)}")
    eq = eq.copy()
    np.fill_diagonal(eq, True)
    return eq


def cluster_ids(equivalent: np.ndarray, rule: str = "reference") -> np.ndarray:
    """Cluster index of each node (clusters numbered in order of their first node) from an n x n
    boolean matrix of equivalence; a pair counts only when both `equivalent[i, j]` and `equivalent[j, i]` hold."""
    eq = np.asarray(equivalent, dtype=bool)
    eq = eq & eq.T
    n = eq.shape[0]
    ids = np.full(n, -1, dtype=np.int64)
    if rule == "reference":
        next_id = 0
        for i in range(n):
            if ids[i] == -1:
                ids[i] = next_id
                later = np.flatnonzero(eq[i, i + 1:]) + i + 1
                ids[later] = next_id  # overwrites earlier assignments, as get_semantic_ids does
                next_id += 1
    elif rule == "first-member":
        firsts: list[int] = []
        for i in range(n):
            for c, first in enumerate(firsts):
                if eq[i, first]:
                    ids[i] = c
                    break
            else:
                ids[i] = len(firsts)
                firsts.append(i)
    elif rule == "chain":
        next_id = 0
        for i in range(n):
            earlier = np.flatnonzero(eq[i, :i])
            if earlier.size:
                ids[i] = ids[earlier[0]]
            else:
                ids[i] = next_id
                next_id += 1
    else:
        raise ValueError(f"unknown clustering rule {rule!r}; choose one of {', '.join(CLUSTERING_RULES)}")
    return ids


def _entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def discrete_semantic_entropy(ids: np.ndarray) -> float:
    """Entropy (nats) of the cluster frequencies (`cluster_assignment_entropy`)."""
    ids = np.asarray(ids)
    if ids.size == 0:
        return float("nan")
    _, counts = np.unique(ids, return_counts=True)
    return _entropy(counts / ids.size)


def weighted_semantic_entropy(ids: np.ndarray, log_likelihoods: np.ndarray) -> float:
    """Entropy (nats) of cluster probabilities from the nodes' normalised likelihoods
    (`logsumexp_by_id(agg="sum_normalized")` + `predictive_entropy_rao`)."""
    ids = np.asarray(ids)
    ll = np.asarray(log_likelihoods, dtype=np.float64)
    if ids.size == 0 or not np.all(np.isfinite(ll)):
        return float("nan")
    w = np.exp(ll - ll.max())
    w /= w.sum()
    return _entropy(np.array([w[ids == c].sum() for c in np.unique(ids)]))
