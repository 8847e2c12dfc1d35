"""One sentence encoder per model and device, with per-text caches of its outputs.

A single forward pass per distinct text yields both the pooled sentence embedding (cosine
similarity, SGE edges) and the token embeddings (BERTScore when it uses the same encoder), so
each distinct text is encoded once per process, however many similarities use it.
"""
from __future__ import annotations

import logging
import threading
from typing import Sequence

import numpy as np

from sage.models.resolve import bundled_embedder_path, resolve_model_path

log = logging.getLogger(__name__)
_LOCK = threading.Lock()
_ENCODERS: dict[tuple[str, str], "SentenceEncoder"] = {}


class SentenceEncoder:
    def __init__(self, path: str, device: str = "cpu", batch_size: int = 64):
        from sentence_transformers import SentenceTransformer

        from sage.metrics.similarity import ForwardClock

        self.path = path
        self.model = SentenceTransformer(path, device=device, local_files_only=True)
        self.batch_size = batch_size
        self.clock = ForwardClock()
        self.clock.attach(self.model)
        tok = self.model.tokenizer
        # BERTScore gives [CLS]/[SEP] zero weight (its default idf dict); other tokens weigh 1.
        self._special = {i for i in (tok.cls_token_id, tok.sep_token_id) if i is not None}
        self._sentence: dict[str, np.ndarray] = {}
        self._tokens: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def clear_cache(self) -> None:
        self._sentence.clear()
        self._tokens.clear()

    @property
    def num_layers(self) -> int:
        return int(self.model[0].auto_model.config.num_hidden_layers)

    def _encode_missing(self, texts: Sequence[str]) -> None:
        missing = list(dict.fromkeys(t for t in texts if t not in self._sentence))
        if not missing:
            return
        outputs = self.model.encode(missing, batch_size=self.batch_size, output_value=None,
                                    show_progress_bar=False)
        for text, out in zip(missing, outputs):
            sent = out["sentence_embedding"].float().numpy()
            self._sentence[text] = sent / max(np.linalg.norm(sent), 1e-12)
            # Features come padded to the batch's longest text: keep this text's own tokens.
            keep = out["attention_mask"].numpy().astype(bool)
            tokens = out["token_embeddings"].float().numpy()[keep]
            tokens = tokens / np.clip(np.linalg.norm(tokens, axis=1, keepdims=True), 1e-12, None)
            ids = out["input_ids"].numpy()[keep]
            self._tokens[text] = (tokens, ~np.isin(ids, list(self._special)))

    def sentence_embeddings(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised pooled embeddings, one row per text."""
        self._encode_missing(texts)
        if not texts:
            return np.zeros((0, self.model.get_sentence_embedding_dimension() or 1))
        return np.stack([self._sentence[t] for t in texts])

    def token_embeddings(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text: L2-normalised token embeddings (len x dim) and the content-token mask."""
        self._encode_missing(texts)
        return [self._tokens[t] for t in texts]


def shared_encoder(model: str | None = None, device: str | None = None) -> SentenceEncoder:
    """The process-wide encoder for `model` (default: the bundled all-MiniLM-L6-v2)."""
    path = str(resolve_model_path(model, what="embedder") if model else bundled_embedder_path())
    key = (path, device or "cpu")
    with _LOCK:
        if key not in _ENCODERS:
            log.info("loading sentence encoder %s", path)
            _ENCODERS[key] = SentenceEncoder(path, device=key[1])
        return _ENCODERS[key]


def clear_encoders() -> None:
    with _LOCK:
        _ENCODERS.clear()


def greedy_bertscore_f1(tokens: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """BERTScore F1 of every pair of one group, from normalised token embeddings.

    Same greedy matching as bert-score's `greedy_cos_idf` with its default weights: each content
    token of the candidate takes its best cosine match among all tokens of the reference
    (special tokens included), precision averages over the candidate, recall over the reference.
    """
    n = len(tokens)
    lengths = np.array([t[0].shape[0] for t in tokens])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    all_tokens = np.concatenate([t[0] for t in tokens])  # float32, as bert-score computes
    best = np.maximum.reduceat(all_tokens @ all_tokens.T, starts, axis=1)  # token x text
    precision = np.empty((n, n))  # precision[i, j]: candidate i against reference j
    for i, (_, content) in enumerate(tokens):
        rows = best[starts[i]:starts[i] + lengths[i]]
        precision[i] = rows[content].mean(axis=0)
    recall = precision.T
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = 2 * precision * recall / (precision + recall)
    np.fill_diagonal(f1, 1.0)
    return f1
