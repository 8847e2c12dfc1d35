"""The ONNX Runtime encoder backend against the torch one on real answers and RoTs."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sage.metrics.similarity import SimilarityOptions
from sage.scoring import ScoreConfig, score_responses

pytestmark = pytest.mark.slow


def test_onnx_scores_equal_torch_to_1e_4(quality100, tmp_path, monkeypatch):
    monkeypatch.setenv("SAGE_CACHE_DIR", str(tmp_path / "cache"))  # the export is made here, once
    df = pd.read_csv(quality100 / "q100_gpt_3.5_rot.csv")
    df = df[df["question_id"].isin(df["question_id"].unique()[:30])]
    results = {}
    for backend in ("torch", "onnx"):
        config = ScoreConfig(metrics=("sge", "bertscore", "cosine"), sge_edges=("cosine", "bertscore"),
                             similarity=SimilarityOptions(encoder_backend=backend), n_boot=50)
        results[backend] = score_responses(df, config, progress=False)
    assert results["onnx"].summary["similarities"]["cosine"]["encoder_backend"] == "onnx"
    assert list((tmp_path / "cache" / "onnx").glob("*/model.onnx"))
    a, b = results["torch"].questions, results["onnx"].questions
    cols = [c for c in a.columns if c.startswith(("sge_", "bertscore_", "cosine_", "meansim_"))]
    assert {"sge_answer", "sge_rot", "sge_bertscore_answer", "bertscore_rot"} <= set(cols)
    worst = max(float(np.nanmax(np.abs(a[c] - b[c]))) for c in cols)
    assert worst < 1e-4, worst


def test_unknown_encoder_backend_is_one_line():
    from sage.errors import SageInputError
    from sage.metrics.encoder import shared_encoder

    with pytest.raises(SageInputError, match="unknown encoder backend 'tpu'"):
        shared_encoder(None, "cpu", "tpu")
