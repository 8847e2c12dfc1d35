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
