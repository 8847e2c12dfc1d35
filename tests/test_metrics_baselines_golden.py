"""Golden check: BLEU and ROUGE-L reproduce the SaGE authors' released pair metrics to 1e-9."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sage.metrics.similarity import BleuSimilarity, RougeLSimilarity, upper_mean


@pytest.fixture(scope="module")
def edges(quality100):
    return pd.read_csv(quality100 / "q100_gpt_3.5_edges.csv")


@pytest.mark.parametrize("col", ["model_output", "rot"])
def test_bleu_golden(edges, col):
    bleu = BleuSimilarity()
    ours = np.array([bleu.pair(r, c) for r, c in zip(edges[f"{col}_1"], edges[f"{col}_2"])])
    np.testing.assert_allclose(ours, edges[f"bleu_{col}"].to_numpy(), rtol=0, atol=1e-9)


@pytest.mark.parametrize("col", ["model_output", "rot"])
def test_rouge_l_golden(edges, col):
    rouge = RougeLSimilarity()
    ours = np.array([rouge.pair(r, c) for r, c in zip(edges[f"{col}_1"], edges[f"{col}_2"])])
    np.testing.assert_allclose(ours, edges[f"rouge_{col}"].to_numpy(), rtol=0, atol=1e-9)


def test_per_question_matrices_agree_with_pairs(edges, quality100):
    """The batched per-question matrices give the authors' per-question means (first text as reference)."""
    from sage.data.responses import read_responses

    df = read_responses(quality100 / "q100_gpt_3.5_rot.csv")
    groups = [g["answer"].tolist() for _, g in df.groupby("question_id", sort=False)][:20]
    bleu, rouge = BleuSimilarity(), RougeLSimilarity()
    pair_value = {
        (a, b): (x, y)
        for a, b, x, y in zip(edges["model_output_1"], edges["model_output_2"],
                              edges["bleu_model_output"], edges["rouge_model_output"])
    }
    for texts, bm, rm in zip(groups, bleu.matrices(groups), rouge.matrices(groups)):
        expected = [pair_value[(texts[i], texts[j])] for i in range(5) for j in range(i + 1, 5)]
        assert upper_mean(bm) == pytest.approx(np.mean([e[0] for e in expected]), abs=1e-9)
        assert upper_mean(rm) == pytest.approx(np.mean([e[1] for e in expected]), abs=1e-9)


_words = st.lists(st.sampled_from(["the", "cat", "sat", "on", "mat", "a", "dog", "runs", "running", "ran", "is", "wrong"]),
                  min_size=0, max_size=14).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(_words, _words)
def test_fast_lexical_metrics_equal_the_libraries(ref, cand):
    """Property: the cached implementations equal NLTK and rouge-score on arbitrary texts."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
    from rouge_score import rouge_scorer

    expected_bleu = sentence_bleu([ref.split()], cand.split(), smoothing_function=SmoothingFunction().method1)
    assert BleuSimilarity().pair(ref, cand) == pytest.approx(expected_bleu, abs=1e-12)
    expected_rouge = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(ref, cand)["rougeL"].fmeasure
    assert RougeLSimilarity().pair(ref, cand) == pytest.approx(expected_rouge, abs=1e-12)
