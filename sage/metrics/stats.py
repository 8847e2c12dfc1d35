"""Bootstrap confidence intervals, vectorised."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MeanCI:
    mean: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict:
        return {"mean": self.mean, "ci_low": self.low, "ci_high": self.high, "n": self.n}

    def fmt(self, digits: int = 3) -> str:
        if self.n == 0:
            return "n/a"
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def bootstrap_mean_ci(values, *, n_boot: int = 2000, alpha: float = 0.05, seed: int = 0) -> MeanCI:
    """Mean of the finite values with a percentile bootstrap (1 - alpha) CI over them."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return MeanCI(float("nan"), float("nan"), float("nan"), 0)
    mean = float(v.mean())
    if v.size == 1:
        return MeanCI(mean, mean, mean, 1)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, v.size, size=(n_boot, v.size))
    boots = v[idx].mean(axis=1)
    low, high = np.quantile(boots, [alpha / 2, 1 - alpha / 2])
    return MeanCI(mean, float(low), float(high), int(v.size))
