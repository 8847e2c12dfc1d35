"""IKE: in-context knowledge editing (Zheng et al., 2023).

No weight changes: the edit is stated in the prompt, after demonstrations retrieved by the bundled
sentence embedder from *other* entries of the pool (never the entry under test). Demonstrations
cycle through IKE's three kinds: copy (the fact itself), update (a paraphrase answered with the
new target) and retain (a neighbourhood prompt answered with its original target). Scoring goes
through `IKEScorer`, which rewrites every query.

Sequential editing (`sage edit --sequential`): the demonstrations include the earlier edits. After
edit t the context is the demonstrations retrieved for edit t, then every earlier edit of the
sequence as a copy demonstration ("New Fact: ... Prompt: <its prompt> <its new target>"), oldest
first, then edit t's fact; every query (earlier edits' prompts included) is answered after it.
With one edit this is the single-edit context. A sequence whose final context would not fit the
model's context window is refused before its first edit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from sage.editing.editor_base import EDITORS, EditorBase, HParams, MemoryEdits, check
from sage.editing.dataset import EditRequest
from sage.editing.handles import WrapperHandle
from sage.editing.target_scoring import LMScorer, PromptRewriteScorer
from sage.errors import SageInputError
from sage.models.resolve import bundled_embedder_path

_EMBEDDERS: dict[str, Any] = {}


def embedder(path: str | None = None):
    """The bundled sentence-transformers model (loaded once per process)."""

    key = str(path or bundled_embedder_path())
    if key not in _EMBEDDERS:
        from sentence_transformers import SentenceTransformer

        _EMBEDDERS[key] = SentenceTransformer(key, device="cpu")
    return _EMBEDDERS[key]


def embed(texts: Sequence[str], path: str | None = None):
    return embedder(path).encode(list(texts), normalize_embeddings=True, convert_to_numpy=True,
                                 show_progress_bar=False)


def fact_line(req: EditRequest) -> str:
    return f"New Fact: {req.prompt} {req.target_new}"


@dataclass(frozen=True)
class IKEHParams(HParams):
    k: int = 6  # demonstrations; small for a 135M model's short context use
    embedder: str = ""  # "" = the bundled all-MiniLM-L6-v2

    def __post_init__(self):
        check(self.k >= 0, type(self).__name__, "k must be >= 0")


def _demo(req: EditRequest, kind: int) -> str:
    if kind == 0:
        query, answer = req.prompt, req.target_new
    elif kind == 1:
        query, answer = req.relation_paraphrases[0], req.target_new
    else:
        query, answer = req.neighbourhood[0], req.target_true
    return f"{fact_line(req)}\nPrompt: {query} {answer}\n\n"


class IKEScorer(PromptRewriteScorer):
    def __init__(self, base: LMScorer, demos: str, fact: str):
        super().__init__(base)
        self.prefix = demos + fact + "\nPrompt: "

    def rewrite(self, prompts: Sequence[str]) -> list[str]:
        return [self.prefix + p for p in prompts]


@EDITORS.register("ike")
class IKEEditor(MemoryEdits, EditorBase):
    name = "ike"
    supports_batch = False
    supports_sequential = True
    uses_pool = True
    hparams_cls = IKEHParams

    def __init__(self, hparams=None, context=None):
        super().__init__(hparams, context)
        self._pool_emb = None
        self._memory: list[EditRequest] = []  # a sequence's edits so far

    def _retrieve(self, req: EditRequest) -> list[EditRequest]:
        pool = [p for p in self.context.pool]
        if self._pool_emb is None and pool:
            self._pool_emb = embed([p.prompt for p in pool], self.hparams.embedder or None)
        candidates = [i for i, p in enumerate(pool) if p.uid != req.uid]
        if self.hparams.k and not candidates:
            raise SageInputError("IKE needs other entries to retrieve demonstrations from; "
                                 "run on more than one entry or set k=0")
        if not candidates:
            return []
        q = embed([req.prompt], self.hparams.embedder or None)[0]
        sims = self._pool_emb[candidates] @ q
        order = np.argsort(-sims)[: self.hparams.k]
        return [pool[candidates[i]] for i in order[::-1]]  # most similar last, nearest the query

    def apply(self, lm: Any, requests: Sequence[Any]) -> WrapperHandle:
        if len(requests) != 1:
            raise SageInputError("IKE edits one entry at a time; drop --batch for ike")
        req = requests[0]
        demos = "".join(_demo(d, i % 3) for i, d in enumerate(self._retrieve(req)))
        scorer = IKEScorer(LMScorer(lm.model, lm.tokenizer), demos, fact_line(req))
        return WrapperHandle(scorer, None, {"demonstrations": demos.count("New Fact")})

    # ------------------------------------------------------------------ sequential
    def _context(self, edits: Sequence[EditRequest]) -> tuple[str, str]:
        """(demonstrations, fact) after `edits`: retrieved for the last, then the earlier edits."""
        last = edits[-1]
        demos = "".join(_demo(d, i % 3) for i, d in enumerate(self._retrieve(last)))
        return demos + "".join(_demo(e, 0) for e in edits[:-1]), fact_line(last)

    def start_sequence(self, lm: Any, sequence: Sequence[Any]) -> None:
        self._memory = []
        if not sequence:
            return
        demos, fact = self._context(list(sequence))
        longest = max([*sequence[-1].action_paraphrases, *sequence[-1].neighbourhood], key=len)
        n = len(lm.tokenizer(demos + fact + "\nPrompt: " + longest).input_ids) + 32
        limit = getattr(lm.model.config, "max_position_embeddings", None)
        if limit is not None and n > limit:
            raise SageInputError(f"IKE: the context after {len(sequence)} sequential edits is about {n} tokens, "
                                 f"more than the model's {limit}; edit fewer entries (--limit)")

    def memory_scorer(self, lm: Any) -> IKEScorer:
        demos, fact = self._context(self._memory)
        return IKEScorer(LMScorer(lm.model, lm.tokenizer), demos, fact)
