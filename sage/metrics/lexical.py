"""Fast exact BLEU and ROUGE-L for many pairs: per-text work (tokens, stems, n-grams) done once.

Both reproduce the reference libraries to floating-point precision (golden-tested against the
SaGE authors' released values):
- BLEU = NLTK `sentence_bleu([ref.split()], cand.split(), smoothing_function=method1)`, 4-gram,
  uniform weights, epsilon 0.1.
- ROUGE-L F = `rouge_score` ROUGE-L with `use_stemmer=True`; the LCS length is computed with the
  bit-parallel algorithm of Hyyrö (2004) on Python integers instead of an O(n*m) table.
"""
from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache

BLEU_ORDER = 4
BLEU_EPSILON = 0.1  # NLTK SmoothingFunction().method1 default


class BleuText:
    """A whitespace-tokenized text with its n-gram counts (orders 1..4)."""

    __slots__ = ("length", "counts")

    def __init__(self, text: str):
        toks = text.split()
        self.length = len(toks)
        self.counts = [
            Counter(tuple(toks[i:i + n]) for i in range(len(toks) - n + 1)) for n in range(1, BLEU_ORDER + 1)
        ]


def bleu(ref: BleuText, hyp: BleuText) -> float:
    """sentence_bleu([ref], hyp) with smoothing method1, as NLTK computes it."""
    logs = []
    for n in range(BLEU_ORDER):
        hyp_counts, ref_counts = hyp.counts[n], ref.counts[n]
        num = sum(min(c, ref_counts.get(g, 0)) for g, c in hyp_counts.items())
        den = max(1, hyp.length - n) if hyp.length > n else 1
        if n == 0 and num == 0:
            return 0.0  # NLTK returns 0 when no unigram matches
        p = num / den if num else BLEU_EPSILON / den
        logs.append(0.25 * math.log(p))
    if hyp.length > ref.length:
        bp = 1.0
    elif hyp.length == 0:
        bp = 0.0
    else:
        bp = math.exp(1 - ref.length / hyp.length)
    return bp * math.exp(math.fsum(logs))


class RougeText:
    """rouge_score tokens (stemmed) of a text, with per-token position bitmasks for the LCS."""

    __slots__ = ("tokens", "masks")

    def __init__(self, tokens: list[str]):
        self.tokens = tokens
        masks: dict[str, int] = {}
        for i, t in enumerate(tokens):
            masks[t] = masks.get(t, 0) | (1 << i)
        self.masks = masks


def lcs_length(a: RougeText, b: RougeText) -> int:
    """Length of the longest common subsequence (bit-parallel, Hyyrö 2004)."""
    m = len(a.tokens)
    if m == 0 or not b.tokens:
        return 0
    full = (1 << m) - 1
    v = full
    for tok in b.tokens:
        u = v & a.masks.get(tok, 0)
        v = ((v + u) | (v - u)) & full
    return m - bin(v).count("1")


def rouge_l_f(target: RougeText, prediction: RougeText) -> float:
    """ROUGE-L F-measure exactly as rouge_score's `_score_lcs` computes it."""
    if not target.tokens or not prediction.tokens:
        return 0.0
    lcs = lcs_length(target, prediction)
    precision = lcs / len(prediction.tokens)
    recall = lcs / len(target.tokens)
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


class _MemoStemmer:
    """rouge-score's Porter stemmer with a per-word memo (stemming dominates ROUGE-L's cost)."""

    def __init__(self):
        from nltk.stem import porter

        self.stem = lru_cache(maxsize=200_000)(porter.PorterStemmer().stem)


@lru_cache(maxsize=1)
def rouge_tokenizer():
    """A callable text -> tokens identical to rouge-score's DefaultTokenizer(use_stemmer=True)."""
    from rouge_score import tokenize

    stemmer = _MemoStemmer()
    return lambda text: tokenize.tokenize(text, stemmer)
