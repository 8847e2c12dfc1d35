"""Edit handles shared by every method: weight snapshots restored bit for bit, hook removal."""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Iterable

from sage.api import EditHandle, TargetScorer


def tensor_hash(t) -> str:
    """SHA-256 of a tensor's raw bytes (dtype and shape included)."""
    import torch

    data = t.detach().to("cpu").contiguous()
    h = hashlib.sha256(f"{data.dtype}|{tuple(data.shape)}".encode())
    h.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return h.hexdigest()


def state_hashes(model: Any) -> dict[str, str]:
    """Hash of every parameter and buffer, for tests that check exact restoration."""
    out = {f"p:{n}": tensor_hash(p) for n, p in model.named_parameters()}
    out.update({f"b:{n}": tensor_hash(b) for n, b in model.named_buffers()})
    return out


def truncate_to(items: list, n: int) -> Callable[[], None]:
    """An undo that cuts `items` back to its first `n` (a sequence's memory as before an edit)."""
    def undo() -> None:
        del items[n:]

    return undo


class WeightSnapshot:
    """Copies of some parameters taken before an edit; `restore()` writes them back in place."""

    def __init__(self, model: Any, names: Iterable[str]):
        params = dict(model.named_parameters())
        self.names = tuple(dict.fromkeys(names))  # what an edit may write
        self._saved = {n: (params[n], params[n].detach().clone()) for n in self.names}
        self._requires_grad = {n: p.requires_grad for n, p in model.named_parameters()}
        self._model = model

    def restore(self) -> None:
        import torch

        with torch.no_grad():
            for param, saved in self._saved.values():
                param.copy_(saved)
        for n, p in self._model.named_parameters():
            p.requires_grad_(self._requires_grad.get(n, p.requires_grad))
        self._saved.clear()


class WeightEditHandle(EditHandle):
    """Handle for methods that change weights in place (FT-L, ROME, MEMIT, AlphaEdit)."""

    def __init__(self, snapshot: WeightSnapshot, scorer: TargetScorer, info: dict | None = None):
        self._snapshot = snapshot
        self._scorer = scorer
        self.info = info or {}

    def restore(self) -> None:
        self._snapshot.restore()

    def scoring_model(self) -> TargetScorer:
        return self._scorer

    def edited_parameters(self) -> tuple[str, ...]:
        return tuple(getattr(self._snapshot, "names", ()))


class WrapperHandle(EditHandle):
    """Handle for methods that leave weights untouched and score through a wrapper."""

    def __init__(self, scorer: TargetScorer, undo: Callable[[], None] | None = None,
                 info: dict | None = None):
        self._scorer = scorer
        self._undo = undo
        self.info = info or {}

    def restore(self) -> None:
        if self._undo is not None:
            self._undo()
            self._undo = None

    def scoring_model(self) -> TargetScorer:
        return self._scorer
