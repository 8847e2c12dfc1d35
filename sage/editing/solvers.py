"""The closed-form weight updates of the locate-then-edit methods, in float64 whatever the
weights' dtype: rank-one (ROME), covariance-regularized least squares over several keys (MEMIT),
and the null-space projected update (AlphaEdit) with its projector."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def rank_one_update(W, k, delta_v, cov=None):
    """ROME: dW = delta_v (C^-1 k)^T / (k^T C^-1 k), so (W + dW) k = W k + delta_v.

    `W` is [value_dim, key_dim]; `k` the template-averaged key (R-ROME); `cov` None = identity."""
    import torch

    k = k.double()
    left = k if cov is None else torch.linalg.solve(cov.double(), k)
    left = left / (k @ left)
    return torch.outer(delta_v.double(), left)


def memit_update(K, R, cov, cov_weight: float):
    """MEMIT: dW = R K^T (lambda C + K K^T)^-1 with K [key_dim, N] and R [value_dim, N]."""
    import torch

    K, R = K.double(), R.double()
    A = cov_weight * cov.double() + K @ K.T
    return torch.linalg.solve(A, K @ R.T).T


@dataclass(frozen=True)
class NullSpace:
    """AlphaEdit's projector P onto the directions of the key second moment C with singular value
    below an absolute threshold, its dimension, and the share of C's trace (the preserved keys'
    variance, E|k|^2) that those directions still hold: trace(P C) / trace(C). dW P K0 stays
    small only while that share is small."""

    projector: Any
    dim: int
    variance_share: float
    threshold: float

    def describe(self) -> dict:
        return {"null_dim": self.dim, "variance_share": self.variance_share,
                "threshold": self.threshold}


def null_space(cov, threshold: float) -> NullSpace:
    """The reference construction (AlphaEdit `get_project`): SVD of C, keep the singular vectors
    whose singular value is below `threshold` (absolute), P = U U^T. In float64."""
    import torch

    U, S, _ = torch.linalg.svd(cov.double(), full_matrices=False)
    keep = S < threshold
    Uk = U[:, keep]
    share = float(S[keep].sum() / S.sum()) if S.sum() > 0 else 0.0
    return NullSpace(Uk @ Uk.T, int(keep.sum()), share, threshold)


def exclude_keys(P, K):
    """A projector onto range(P) ∩ null(K^T): P minus the projector onto span(P K), so that
    K^T P' = 0 (to float64 rounding) and P' still lies in range(P). Directions of P K with a
    singular value below numpy's rank tolerance (max dimension x eps x largest) are kept in P'.
    `K` is [key_dim, n]."""
    import torch

    P = P.double()
    M = P @ K.double().to(P.device)
    if M.numel() == 0:
        return P
    U, S, _ = torch.linalg.svd(M, full_matrices=False)
    if float(S.max()) == 0.0:
        return P
    tol = max(M.shape) * torch.finfo(torch.float64).eps * S.max()
    Q = U[:, S > tol]
    return P - Q @ Q.T


def alphaedit_update(K, R, P, l2: float):
    """AlphaEdit: dW = R K^T P (K K^T P + l2 I)^-1 (the reference solves the transposed system
    (P K K^T + l2 I) X = P K R^T, dW = X^T). X lies in the range of P, so dW k0 = X^T P k0 ~ 0 for
    preserved keys k0. In float64."""
    import torch

    K, R, P = K.double(), R.double(), P.double()
    eye = torch.eye(P.shape[0], dtype=P.dtype, device=P.device)
    return torch.linalg.solve(P @ (K @ K.T) + l2 * eye, P @ K @ R.T).T
