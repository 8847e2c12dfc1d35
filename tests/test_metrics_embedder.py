"""The bundled embedder really embeds; each distinct text is encoded once per run."""
from __future__ import annotations

import numpy as np
import pytest

from sage.metrics.similarity import CosineSimilarity

pytestmark = pytest.mark.slow


class RecordingCosine(CosineSimilarity):
    """The real similarity, recording what reaches the encoder."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.encoded: list[list[str]] = []

    def embed(self, texts):
        self.encoded.append(list(texts))
        return super().embed(texts)


@pytest.fixture(scope="module")
def cosine():
    return RecordingCosine()


def test_real_embeddings(cosine, embedder_path):
    assert (embedder_path / "model.safetensors").exists()
    e = cosine.embed(["Lying is wrong.", "It is wrong to lie.", "The stock market rose today."])
    assert e.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    sims = e @ e.T
    assert sims[0, 1] > 0.6 > sims[0, 2]  # paraphrases are close, unrelated text is far


def test_each_distinct_text_encoded_once(cosine):
    cosine.encoded.clear()
    groups = [["a b", "c d", "a b"], ["c d", "e f"], ["a b", "g h"]]
    mats = cosine.matrices(groups)
    assert len(cosine.encoded) == 1 and sorted(cosine.encoded[0]) == ["a b", "c d", "e f", "g h"]
    assert [m.shape for m in mats] == [(3, 3), (2, 2), (2, 2)]
    assert mats[0][0, 2] == pytest.approx(1.0, abs=1e-5)
    assert cosine.clock.seconds > 0  # forward passes are timed


def test_shared_encoder_bertscore_equals_bert_score_library(embedder_path):
    """BERTScore from the shared encoder's token embeddings equals bert_score.BERTScorer's F1."""
    from bert_score import BERTScorer

    from sage.metrics.similarity import BertScoreSimilarity

    groups = [
        ["It is wrong to lie to a friend.", "Lying to friends is usually wrong, but white lies can be kind.",
         "You should always tell the truth."],
        ["Return the wallet.", "Keep it; finders keepers.  "],
    ]
    ours = BertScoreSimilarity()
    assert ours.shared and ours.describe()["implementation"] == "shared-encoder"
    scorer = BERTScorer(model_type=str(embedder_path), num_layers=6)
    for texts, mat in zip(groups, ours.matrices(groups)):
        for i in range(len(texts)):
            for j in range(len(texts)):
                if i != j:
                    _, _, f1 = scorer.score([texts[j]], [texts[i]])
                    assert mat[i, j] == pytest.approx(float(f1[0]), abs=1e-5)


def test_other_layer_uses_bert_scorer(embedder_path):
    from sage.metrics.similarity import BertScoreSimilarity

    sim = BertScoreSimilarity(model=str(embedder_path), num_layers=4)
    assert not sim.shared and sim.describe()["implementation"] == "bert_score.BERTScorer"
    m = sim.matrices([["a kind act", "a cruel act", "a kind act"]])[0]
    assert m.shape == (3, 3) and m[0, 2] == pytest.approx(1.0, abs=1e-5) and m[0, 1] < 1.0
