"""What ROME, MEMIT and AlphaEdit share: the value-optimization hyperparameters (one validated
base), the key statistics they memoize, and the context prefixes."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

from sage.editing import key_statistics
from sage.editing.editor_base import EditorBase, HParams, check
from sage.editing.capture import context_templates
from sage.editing.profiles import profile_for
from sage.editing.value_optimization import DeltaSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ValueOptHParams(HParams):
    """Context prefixes, ROME's value objective and the key statistics (sage/editing/TUNING.md
    names each reference value and where ours differs)."""

    n_context: int = 2  # model-generated prefixes (ROME: 20, MEMIT: 5), plus the bare prompt
    context_length: int = 10
    v_steps: int = 25
    v_lr: float = 1.0
    kl_factor: float = 0.0625
    weight_decay: float = 0.5
    clamp_norm_factor: float = 8.0  # x |down-projection output| at the subject's last token
    covariance: str = "corpus"  # "corpus" | "identity"
    stats_tokens: int = 0  # 0: 100 x the key dimension
    v_stop_nll: float = 0.05  # a request's value optimization stops below this target NLL
    v_batch: int = 16  # requests whose value vectors are optimized in one forward/backward pass

    def __post_init__(self):
        name = type(self).__name__
        check(self.n_context >= 0 and self.context_length >= 1, name,
              "n_context >= 0, context_length >= 1")
        check(self.v_steps >= 1 and self.v_lr > 0, name, "v_steps >= 1 and v_lr > 0")
        check(self.kl_factor >= 0 and self.weight_decay >= 0, name, "kl_factor, weight_decay >= 0")
        check(self.clamp_norm_factor > 0, name, "clamp_norm_factor must be > 0")
        check(self.covariance in ("corpus", "identity"), name,
              f"covariance must be 'corpus' or 'identity', got {self.covariance!r}")
        check(self.stats_tokens >= 0, name, "stats_tokens must be >= 0 (0 = automatic)")
        check(self.v_stop_nll >= 0 and self.v_batch >= 1, name, "v_stop_nll >= 0 and v_batch >= 1")

    def delta_settings(self) -> DeltaSettings:
        return DeltaSettings(self.v_steps, self.v_lr, self.kl_factor, self.weight_decay,
                             self.clamp_norm_factor, self.v_stop_nll, self.v_batch)


class LocateThenEditEditor(EditorBase):
    """Base of ROME, MEMIT and AlphaEdit: key statistics memoized per layer, context prefixes.

    Sequentially, each edit optimizes its value and solves for its update on the model as the
    earlier edits left it (the KL term's reference distribution, the keys and the residuals are
    the edited model's), as EasyEdit's sequential editing does; the key statistics and the
    context prefixes come from the unedited model (`start_sequence`), so a resumed sequence
    uses the same ones."""

    hparams_cls = ValueOptHParams
    supports_sequential = True

    def __init__(self, hparams=None, context=None):
        super().__init__(hparams, context)
        self._cov: dict = {}
        if self.hparams.covariance == "identity":
            log.warning("%s with an identity covariance: updates ignore key statistics and "
                        "disturb unrelated inputs more; prefer covariance='corpus'", self.name)

    def covariances(self, lm: Any, layers: Sequence[int]) -> dict[int, Any]:
        """Key second moments for `layers` (None each with an identity covariance), memoized on
        the editor and cached on disk (key_statistics.py)."""
        if self.hparams.covariance == "identity":
            return {layer: None for layer in layers}

        tokens = self.hparams.stats_tokens
        missing = [layer for layer in layers if (layer, tokens) not in self._cov]
        if missing:
            profile = profile_for(lm.model)
            n = tokens or key_statistics.default_stats_tokens(lm.model, profile, missing[0])
            got = key_statistics.covariances(lm.model, lm.tokenizer, profile, missing,
                                             corpus_file=self.context.corpus, n_tokens=n,
                                             seed=self.hparams.seed)
            for layer, cov in got.items():
                self._cov[(layer, tokens)] = cov
        return {layer: self._cov[(layer, tokens)] for layer in layers}

    def edit_layers(self, model: Any) -> list[int]:
        """The layers this method writes, resolved against the model's depth."""
        raise NotImplementedError

    def start_sequence(self, lm: Any, sequence: Sequence[Any]) -> None:
        self.covariances(lm, self.edit_layers(lm.model))
        self.contexts(lm)

    def contexts(self, lm: Any) -> list[str]:
        hp = self.hparams
        return context_templates(lm.model, lm.tokenizer, hp.n_context, hp.context_length, hp.seed)
