"""ParaScore computed on bert-score with the bundled encoder, cross-checked against the `parascore` package."""
from __future__ import annotations

import importlib.util
import random

import pytest

from sage.paraphrase.parascore import (
    DEFAULT_THRESHOLD,
    GAMMA,
    ParaScorer,
    diversity,
    edit_distance,
)

SOURCES = ["Is it wrong to lie to a friend to spare their feelings?"] * 4
CANDIDATES = [
    "Is lying to a friend wrong if it spares their feelings?",
    "Is it wrong to lie to a friend to spare their feelings?",
    "Can you justify telling a friend a lie so they are not hurt?",
    "What is the capital of France?",
]


def test_edit_distance_and_diversity_term():
    nltk = pytest.importorskip("nltk")
    rng = random.Random(0)
    for _ in range(50):
        a = "".join(rng.choice("abc ") for _ in range(rng.randint(0, 12)))
        b = "".join(rng.choice("abc ") for _ in range(rng.randint(0, 12)))
        assert edit_distance(a, b) == nltk.edit_distance(a, b)
    assert diversity("same", "same") == -1.0
    assert diversity("abcdefghij", "abcdefgxyz") == pytest.approx(-1 + (GAMMA + 1) / GAMMA * 0.3)
    assert diversity("abc", "xyz") == GAMMA
    assert DEFAULT_THRESHOLD == 0.8


@pytest.mark.slow
def test_parascore_is_bertscore_plus_diversity(embedder_path):
    scorer = ParaScorer(embedder_path, num_layers=6)
    res = scorer.score(SOURCES, CANDIDATES)
    for r, src, cand in zip(res, SOURCES, CANDIDATES):
        assert r.score == pytest.approx(r.similarity + 0.05 * diversity(src, cand))
    assert res[1].similarity == pytest.approx(1.0, abs=1e-4) and res[1].score == pytest.approx(0.95, abs=1e-4)
    assert res[0].score > DEFAULT_THRESHOLD > res[3].score
    assert ParaScorer()._scorer() is scorer._scorer()  # the encoder is built once


@pytest.mark.slow
def test_matches_parascore_package_base_score(embedder_path):
    if importlib.util.find_spec("parascore") is None:
        pytest.skip("parascore not installed (pip install parascore==1.0.5)")
    from parascore import ParaScorer as Reference

    ref = Reference(model_type=str(embedder_path), num_layers=6, device="cpu")
    expected = ref.base_score(CANDIDATES, SOURCES, SOURCES)
    ours = [r.score for r in ParaScorer(embedder_path, num_layers=6).score(SOURCES, CANDIDATES)]
    assert ours == pytest.approx(expected, abs=1e-5)
