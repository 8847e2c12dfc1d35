"""Generation fluency as n-gram entropy (the measure ROME and MEMIT report after an edit).

For one text: the entropy (bits) of its bigram and trigram frequency distributions, weighted 2/3
and 4/3, averaged. A model that degenerates into repeating itself scores low.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import Iterable, Sequence

import numpy as np

_WORD = re.compile(r"\w+|[^\w\s]")
NS: tuple[int, ...] = (2, 3)
WEIGHTS: tuple[float, ...] = (2 / 3, 4 / 3)


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def ngram_entropy(text: str, ns: Sequence[int] = NS, weights: Sequence[float] = WEIGHTS) -> float:
    """Weighted mean of the n-gram entropies (bits); 0.0 for a text with no n-grams."""
    toks = words(text)
    parts = []
    for n, w in zip(ns, weights):
        counts = Counter(tuple(toks[i:i + n]) for i in range(len(toks) - n + 1))
        total = sum(counts.values())
        h = -sum(c / total * math.log2(c / total) for c in counts.values()) if total else 0.0
        parts.append(w * h)
    return float(np.mean(parts))


def mean_ngram_entropy(texts: Iterable[str]) -> float:
    vals = [ngram_entropy(t) for t in texts]
    return float(np.mean(vals)) if vals else float("nan")
