"""Golden check: BLEU and ROUGE-L reproduce the SaGE authors' released pair metrics to 1e-9."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

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
