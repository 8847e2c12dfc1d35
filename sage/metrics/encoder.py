"""One sentence encoder per model, device and backend, with per-text caches of its outputs.

A single forward pass per distinct text yields both the pooled sentence embedding (cosine
similarity, SGE edges) and the token embeddings (BERTScore when it uses the same encoder), so
each distinct text is encoded once per process, however many similarities use it.

Backends: `torch` (sentence-transformers as loaded) and `onnx`: the model's transformer exported
once to ONNX (cached under `$SAGE_CACHE_DIR/onnx/<model fingerprint>/`) and run with ONNX Runtime,
its outputs then passed through the model's own sentence-transformers pooling and normalisation
modules. (sentence-transformers' own `backend="onnx"` needs optimum-onnx, which pins
transformers < 4.58; this project runs transformers 5, so the export is done here.)
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from sage.errors import SageInputError
from sage.metrics.forward_clock import ForwardClock
from sage.models.identity import fingerprint
from sage.models.resolve import bundled_embedder_path, resolve_model_path
from sage.outputs import write_whole
from sage.settings import cache_dir

log = logging.getLogger(__name__)
_LOCK = threading.Lock()
_ENCODERS: dict[tuple[str, str, str], "SentenceEncoder"] = {}
BACKENDS = ("torch", "onnx")


class SentenceEncoder:
    def __init__(self, path: str, device: str = "cpu", batch_size: int = 64, backend: str = "torch"):
        from sentence_transformers import SentenceTransformer

        self.path = path
        self.backend = backend
        self.model = SentenceTransformer(path, device=device, local_files_only=True)
        self.batch_size = batch_size
        self.clock = ForwardClock()
        self.clock.attach(self.model)
        self._onnx = _OnnxTransformer(self.model, path) if backend == "onnx" else None
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
        # A few batches at a time: each output is a view of its whole padded batch tensor, so
        # holding every output until the end would keep every batch alive at once.
        step = 4 * self.batch_size
        for start in range(0, len(missing), step):
            self._encode_slice(missing[start:start + step])

    def _encode_slice(self, missing: list[str]) -> None:
        if self._onnx is not None:
            outputs = self._onnx.encode(missing, self.batch_size, self.clock)
        else:
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


def shared_encoder(model: str | None = None, device: str | None = None, backend: str = "torch") -> SentenceEncoder:
    """The process-wide encoder for `model` (default: the bundled all-MiniLM-L6-v2)."""
    if backend not in BACKENDS:

        raise SageInputError(f"unknown encoder backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    path = str(resolve_model_path(model, what="embedder") if model else bundled_embedder_path())
    key = (path, device or "cpu", backend)
    with _LOCK:
        if key not in _ENCODERS:
            log.info("loading sentence encoder %s (%s)", path, backend)
            _ENCODERS[key] = SentenceEncoder(path, device=key[1], backend=backend)
        return _ENCODERS[key]


class _OnnxTransformer:
    """The model's transformer module as an ONNX Runtime session (exported once, cached); the
    model's later modules (pooling, normalisation) run on its outputs unchanged."""

    def __init__(self, st_model, path: str):
        try:
            import onnxruntime as ort
        except ImportError:

            raise SageInputError("the onnx encoder backend needs ONNX Runtime: "
                                 "`pip install 'sage-consistency[onnx]'`") from None
        self.st = st_model
        onnx_path = self._export(st_model, path)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        import torch

        opts.intra_op_num_threads = torch.get_num_threads()
        self.session = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    @staticmethod
    def _export(st_model, path: str):
        import torch


        out = cache_dir() / "onnx" / fingerprint(path) / "model.onnx"
        if out.exists():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        auto = st_model[0].auto_model.eval()
        sample = _tokenize(st_model, ["an example", "a second, longer example text"])
        names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]

        class _Hidden(torch.nn.Module):  # keyword call: forward's positional order varies by version
            def __init__(self, model):
                super().__init__()
                self.model = model

            def forward(self, *args):
                return self.model(**dict(zip(names, args))).last_hidden_state

        log.info("exporting %s to ONNX once (%s)", path, out)

        def export(tmp: Path) -> None:
            with torch.no_grad():
                torch.onnx.export(_Hidden(auto), tuple(sample[n] for n in names), str(tmp), input_names=names,
                                  output_names=["last_hidden_state"],
                                  dynamic_axes={n: {0: "batch", 1: "tokens"} for n in names + ["last_hidden_state"]},
                                  opset_version=17, dynamo=False)

        return write_whole(out, export)

    def encode(self, texts, batch_size: int, clock) -> list[dict]:
        """Per text, what sentence-transformers' encode(output_value=None) gives."""

        import torch

        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # similar lengths share a batch
        outputs: list[dict | None] = [None] * len(texts)
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            features = _tokenize(self.st, [texts[i] for i in idx])
            t0 = time.perf_counter()
            hidden = self.session.run(None, {n: features[n].numpy() for n in self.inputs})[0]
            clock.seconds += time.perf_counter() - t0
            features["token_embeddings"] = torch.from_numpy(hidden)
            with torch.no_grad():
                for module in list(self.st)[1:]:  # pooling, normalisation: the model's own modules
                    features = module(features)
            for row, i in enumerate(idx):
                outputs[i] = {"token_embeddings": features["token_embeddings"][row],
                              "sentence_embedding": features["sentence_embedding"][row],
                              "attention_mask": features["attention_mask"][row],
                              "input_ids": features["input_ids"][row]}
        return outputs


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


def _tokenize(st_model, texts):
    """sentence-transformers' own tokenization (`preprocess`, `tokenize` before version 6)."""
    return (getattr(st_model, "preprocess", None) or st_model.tokenize)(texts)
