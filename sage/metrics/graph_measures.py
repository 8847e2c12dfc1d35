"""Graph consistency measures from the uncertainty literature, on one question's answer graph.

The graph is the question's n x n edge similarity S (any of `sage`'s edge similarities: cosine,
BERTScore, ROUGE-L, BLEU, NLI, judge or a pair file's column). `affinity` turns it into the weight
matrix W every measure here uses: symmetrised ((S + S^T) / 2, for BLEU), 1 on the diagonal and
between identical texts (the convention of Lin et al.'s `get_affinity_mat`, which sets W_ii = 1,
and of SGE, which puts identical texts at distance 0), clipped to [0, 1] (a Laplacian needs
non-negative weights; a negative cosine counts as 0).

All are *uncertainty* measures: larger means less consistent (`sage correlate` negates them when
it ranks measures by agreement with people).

- `num_sets`: NumSemSets, the number of semantic sets (Lin, Trivedi & Sun, "Generating with
  Confidence", TMLR 2024, arXiv:2305.19187). Follows LM-Polygraph
  (`src/lm_polygraph/estimators/num_sem_sets.py`): connected components of the graph joining i and
  j when both directions agree, P(entail) > P(contradiction) for NLI edges, P(yes) > 0.5 for the
  judge (`EntailmentRelations.agrees`). Edge similarities that do not judge entailment join i and
  j when W_ij > `num_sets_threshold` (0.5): sage's extension, no reference defines it for them.
  Lin et al.'s own code (zlin7/UQ-NLG `pipeline/uq_bb.py`, `_create_semantic_sets`) counts Kuhn et
  al.'s greedy clusters instead; semantic entropy's `n_clusters` column is that kind of count.
- `eigv`: sum over the eigenvalues lambda_k of the symmetric normalised Laplacian
  L = I - D^-1/2 W D^-1/2 (D_ii = sum_j W_ij) of max(0, 1 - lambda_k) (Lin et al. "EigV";
  UQ-NLG `pipeline/clustering.py` `get_eigvs` + `get_spectral_eigv(adjust=True)`; LM-Polygraph
  `eig_val_laplacian.py`). k disjoint cliques give k.
- `degree`: trace(nI - D) / n^2 (Lin et al. "Degree", the paper's U_Deg and LM-Polygraph
  `deg_mat.py`; UQ-NLG's `get_degreeuq` returns n times this, the same ranking). Between 0 (all
  pairs similar 1) and (n - 1) / n.
- `eccentricity`: the eigenvectors of L with eigenvalue < `eccentricity_threshold` (0.9, Lin et
  al.'s and LM-Polygraph's default) give each node an embedding (row j of the n x k matrix V);
  U_Ecc = || V - mean over nodes of V ||_F (Lin et al. "Ecc"; UQ-NLG `get_eccentricity`;
  LM-Polygraph `eccentricity.py`, which computes the same norm per eigenvector). k disjoint
  cliques give sqrt(k - 1).
- `kle`: Kernel Language Entropy (Nikitin, Kossen, Gal & Marttinen, NeurIPS 2024; official code
  AlexanderVNikitin/kernel-language-entropy, `kle/kernels.py` and `kle/core.py`; LM-Polygraph
  `kernel_language_entropy.py`): the von Neumann entropy -sum_k mu_k ln mu_k of the unit-trace
  kernel K'_ij = K_ij / sqrt(K_ii K_jj) / n, with the heat kernel K = expm(-t L_G) (`t` = 0.3,
  LM-Polygraph's default) or the Matern kernel K = (2 nu / kappa^2 I + L_G)^(-nu) (`nu` = `kappa`
  = 1, the official `matern_kernel` defaults), on the graph Laplacian L_G = D_G - A (degree minus
  adjacency: the sign of the paper and of LM-Polygraph 0.6+; LM-Polygraph 0.5 and earlier
  returned A - D from `laplacian_matrix`, fixed in its PR #413). The graph's weights A are the sum
  of the two directions' similarities, as KLE's NLI graph adds both directions' weights
  (LM-Polygraph averaged the two directions before its commit 4c1123c): A = 2 W off the diagonal.
  With `--nli-edge graded` (soft: P(entail) + 0.5 P(neutral), mean of both directions) this is
  exactly LM-Polygraph's weighted graph; the official `get_entailment_graph` instead weights the
  argmax label one-hot (entailment 1, neutral 0.5, contradiction 0): `--nli-edge kle-onehot`.
  `t` = 0.3 is LM-Polygraph's default; the official code uses 0.4 and the paper searches 0.1-0.7. The value is
  in nats and not divided by ln n (the paper's KLE; the official `vn_entropy` and LM-Polygraph
  divide by ln n by default). Eigenvalues <= 1e-8 count as 0, as in the official `vn_entropy`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from sage.errors import SageInputError
from sage.metrics.sge import distances_from_similarity, require_finite

KERNELS = ("heat", "matern")
_VNE_CUTOFF = 1e-8  # eigenvalues at or below it contribute 0 (the official `vn_entropy`)


@dataclass(frozen=True)
class GraphOptions:
    """Hyperparameters of the graph measures (module docstring); recorded in summary.json."""

    kle_kernel: str = "heat"  # heat or matern
    kle_t: float = 0.3  # heat kernel time
    kle_nu: float = 1.0  # Matern smoothness
    kle_kappa: float = 1.0  # Matern length scale
    eccentricity_threshold: float = 0.9  # eigenvectors of L with eigenvalue below it
    num_sets_threshold: float = 0.5  # W_ij above it joins i and j (edges that do not judge entailment)

    def __post_init__(self):
        if self.kle_kernel not in KERNELS:
            raise SageInputError(f"unknown KLE kernel {self.kle_kernel!r}; choose one of {', '.join(KERNELS)}")
        for name in ("kle_t", "kle_nu", "kle_kappa"):
            if not getattr(self, name) > 0:
                raise SageInputError(f"{name.replace('_', '-')} must be > 0 (got {getattr(self, name)})")
        if not 0 < self.eccentricity_threshold <= 2:
            raise SageInputError("eccentricity threshold must be in (0, 2], the range of the normalised "
                                 f"Laplacian's eigenvalues (got {self.eccentricity_threshold})")
        if not 0 <= self.num_sets_threshold < 1:
            raise SageInputError(f"num-sets threshold must be in [0, 1) (got {self.num_sets_threshold})")


def affinity(sim: np.ndarray, texts: Sequence[str] | None = None) -> np.ndarray:
    """W: symmetrised similarity in [0, 1], 1 on the diagonal and between identical texts."""
    return np.clip(1.0 - distances_from_similarity(sim, texts), 0.0, 1.0)


def normalized_laplacian(w: np.ndarray) -> np.ndarray:
    """I - D^-1/2 W D^-1/2 with D_ii = sum_j W_ij (>= 1, since W_ii = 1)."""
    w = require_finite(w, "affinity matrix")
    inv_sqrt = 1.0 / np.sqrt(w.sum(axis=1))
    return np.eye(w.shape[0]) - inv_sqrt[:, None] * w * inv_sqrt[None, :]


def eigv(w: np.ndarray) -> float:
    lam = np.linalg.eigvalsh(normalized_laplacian(w))
    return float(np.clip(1.0 - lam, 0.0, None).sum())


def degree(w: np.ndarray) -> float:
    w = require_finite(w, "affinity matrix")
    n = w.shape[0]
    return float((n * n - w.sum()) / (n * n))


def eccentricity(w: np.ndarray, threshold: float = 0.9) -> float:
    lam, vec = np.linalg.eigh(normalized_laplacian(w))
    v = vec[:, lam < threshold]
    return float(np.linalg.norm(v - v.mean(axis=0, keepdims=True)))


def num_sets(joined: np.ndarray) -> int:
    """Connected components of the graph joining i and j where `joined[i, j]` and `joined[j, i]`."""
    from scipy.sparse.csgraph import connected_components

    j = require_finite(joined, "joined matrix").astype(bool)
    return int(connected_components(j & j.T, directed=False)[0])


def kernel_matrix(w: np.ndarray, options: GraphOptions = GraphOptions()) -> np.ndarray:
    """The heat or Matern kernel of the graph with adjacency 2 W (off the diagonal)."""
    a = 2.0 * require_finite(w, "affinity matrix")
    np.fill_diagonal(a, 0.0)
    lap = np.diag(a.sum(axis=0)) - a
    lam, vec = np.linalg.eigh(lap)  # L_G is symmetric positive semi-definite
    lam = np.clip(lam, 0.0, None)
    if options.kle_kernel == "heat":
        spec = np.exp(-options.kle_t * lam)
    else:
        spec = (2.0 * options.kle_nu / options.kle_kappa ** 2 + lam) ** (-options.kle_nu)
    return (vec * spec) @ vec.T


def von_neumann_entropy(k: np.ndarray) -> float:
    """-sum mu ln mu over the eigenvalues of the unit-trace normalised kernel K_ij / sqrt(K_ii K_jj) / n."""
    d = np.sqrt(np.diag(k))
    rho = k / np.outer(d, d) / k.shape[0]
    mu = np.linalg.eigvalsh((rho + rho.T) / 2)
    mu = mu[mu > _VNE_CUTOFF]
    return float(-(mu * np.log(mu)).sum())


def kle(w: np.ndarray, options: GraphOptions = GraphOptions()) -> float:
    return von_neumann_entropy(kernel_matrix(w, options))
