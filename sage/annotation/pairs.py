"""The answer (and RoT) pairs of each question, with stable pair ids and content hashes.

A *response key* is `(paraphrase_id, sample)`; the pairs of one (model, question_id) are the
C(n, 2) unordered pairs of its responses, ordered by key, so `text_a` always belongs to the
smaller key. The pair id hashes (model, question_id, kind, key_a, key_b) and therefore does not
change when other questions are added or rows are reordered; `content_hash` hashes the two texts so
that labels can be checked against the texts annotators actually saw.

Sampling (`max_pairs` per question) uses a generator seeded by (seed, model, question_id, kind),
so one question's sample does not depend on which other questions are present.
"""
from __future__ import annotations

import hashlib
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sage.data.responses import response_keys
from sage.errors import SageInputError

log = logging.getLogger(__name__)

KINDS = {"answer": "answer", "rot": "rot"}
PAIR_COLUMNS = [
    "pair_id", "content_hash", "kind", "model", "question_id", "question",
    "key_a", "key_b", "paraphrase_a", "paraphrase_b", "text_a", "text_b",
]


def _digest(*parts: Any, n: int) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()[:n]


def pair_id(model: str, question_id: Any, kind: str, key_a: str, key_b: str) -> str:
    return f"{kind}-{_digest(model, question_id, kind, key_a, key_b, n=16)}"


def content_hash(text_a: str, text_b: str) -> str:
    return _digest(text_a, text_b, n=16)


def normalise_text(text: Any) -> str:
    return " ".join(str(text).split())


@dataclass
class PairSet:
    pairs: Any  # pandas.DataFrame with PAIR_COLUMNS
    counts: dict[str, int] = field(default_factory=dict)
    seed: int | None = None
    max_pairs: int | None = None


def prepare_responses(responses, source: str):
    """A copy with defaults for the optional columns and a response key `_key`; refuses repeated keys."""
    import pandas as pd

    df = responses.copy()
    for col in ("question_id", "answer"):
        if col not in df.columns:
            raise SageInputError(
                f"{source}: missing column {col!r}; a responses table needs question_id and answer "
                f"(columns present: {', '.join(map(str, df.columns))})"
            )
    if "model" not in df.columns:
        df["model"] = ""
    if "sample" not in df.columns:
        df["sample"] = 0
    if "paraphrase_id" not in df.columns:
        df["paraphrase_id"] = df.groupby(["model", "question_id", "sample"], sort=False).cumcount()
    if "question" not in df.columns:
        df["question"] = ""
    if "paraphrase" not in df.columns:
        df["paraphrase"] = ""
    df["model"] = df["model"].fillna("").astype(str)
    df["_key"] = response_keys(df)
    dup = df.duplicated(["model", "question_id", "_key"], keep=False)
    if dup.any():
        row = df.index[dup][0]
        r = df.loc[row]
        raise SageInputError(
            f"{source}: row {row}: model {r['model']!r}, question {r['question_id']!r}, paraphrase "
            f"{r['paraphrase_id']!r}, sample {r['sample']!r} occurs {int(dup.sum())} times in all; "
            f"give each response a distinct (paraphrase_id, sample)"
        )
    df["question"] = df["question"].where(pd.notna(df["question"]), "").astype(str)
    df["paraphrase"] = df["paraphrase"].where(pd.notna(df["paraphrase"]), "").astype(str)
    return df


def build_pairs(
    responses,
    kinds: tuple[str, ...] = ("answer",),
    max_pairs: int | None = None,
    seed: int = 0,
    source: str = "responses",
) -> PairSet:
    """All C(n,2) pairs per (model, question_id, kind), or a seeded sample of `max_pairs` of them."""
    import pandas as pd

    if max_pairs is not None and max_pairs < 1:
        raise SageInputError(f"--max-pairs must be >= 1 (got {max_pairs})")
    for kind in kinds:
        if kind not in KINDS:
            raise SageInputError(f"unknown pair kind {kind!r}; use answer or rot")
    df = prepare_responses(responses, source)
    if "rot" in kinds and "rot" not in df.columns:
        raise SageInputError(f"{source}: RoT pairs requested but the table has no 'rot' column; drop --rot")
    rows: list[dict[str, Any]] = []
    counts = {"responses": len(df), "groups": 0, "blank_texts": 0, "pairs_possible": 0, "pairs": 0}
    for (model, qid), group in df.groupby(["model", "question_id"], sort=True):
        group = group.sort_values("_key")
        counts["groups"] += 1
        question = group["question"].iloc[0]
        for kind in kinds:
            col = KINDS[kind]
            texts = group[col]
            ok = texts.notna() & (texts.astype(str).str.strip() != "")
            counts["blank_texts"] += int((~ok).sum())
            g = group[ok]
            combos = list(itertools.combinations(range(len(g)), 2))
            counts["pairs_possible"] += len(combos)
            if max_pairs is not None and len(combos) > max_pairs:
                rng = np.random.default_rng(int(_digest(seed, model, qid, kind, n=15), 16))
                chosen = sorted(rng.choice(len(combos), size=max_pairs, replace=False).tolist())
                combos = [combos[i] for i in chosen]
            keys, tx, para = g["_key"].tolist(), g[col].astype(str).tolist(), g["paraphrase"].tolist()
            for i, j in combos:
                rows.append({
                    "pair_id": pair_id(model, qid, kind, keys[i], keys[j]),
                    "content_hash": content_hash(tx[i], tx[j]),
                    "kind": kind, "model": model, "question_id": qid, "question": question,
                    "key_a": keys[i], "key_b": keys[j], "paraphrase_a": para[i], "paraphrase_b": para[j],
                    "text_a": tx[i], "text_b": tx[j],
                })
    counts["pairs"] = len(rows)
    if counts["blank_texts"]:
        log.warning("%s: %d blank %s texts left out of pairs", source, counts["blank_texts"], "/".join(kinds))
    if not rows:
        raise SageInputError(f"{source}: no pairs: every question has fewer than two non-blank {'/'.join(kinds)} texts")
    return PairSet(pd.DataFrame(rows, columns=PAIR_COLUMNS), counts, seed, max_pairs)
