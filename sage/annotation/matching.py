"""Which pair a label row belongs to: ids checked against an export, or texts found in the responses.

Our exports carry pair ids and content hashes. Outside files carry only the two texts, e.g. the
SaGE authors' annotator sheet `question_id, question, model_output_1, model_output_2, ann1, ann2, ann3`.
`TextIndex.match` finds the two responses of the row's question (of every question when the row has
no question_id) whose whitespace-normalised texts equal the row's texts, in either order, and
returns that pair's id. A row that matches nothing gets a `Miss` with the reason; the importer skips
and counts it (`--ignore-unknown`) or stops with one line naming the file, row and column.

Without responses or a pairs file, text rows get a *local* id hashed from (question_id, the two
texts in sorted order), so agreement can be computed on the file alone; a local id is matched by its
texts again once responses are given.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from sage.annotation.cells import text_variants
from sage.annotation.pairs import KINDS, content_hash, normalise_text, pair_id, prepare_responses

LOCAL_PREFIX = "text-"


@dataclass(frozen=True)
class Miss:
    """Why a row matches no pair. `ambiguous`: it matches several (a setting problem, never skipped)."""

    reason: str
    ambiguous: bool = False


def local_pair_id(question_id: Any, text_a: str, text_b: str) -> str:
    a, b = sorted((normalise_text(text_a), normalise_text(text_b)))
    qid = "" if question_id is None else str(question_id)
    return LOCAL_PREFIX + hashlib.sha256("\x1f".join((qid, a, b)).encode("utf-8")).hexdigest()[:16]


def is_local(pid: Any) -> bool:
    return isinstance(pid, str) and pid.startswith(LOCAL_PREFIX)


class TextIndex:
    """The responses' texts of one kind, whitespace-normalised, with the (model, question, key) they belong to."""

    def __init__(self, responses, kind: str = "answer", model: str | None = None):
        df = prepare_responses(responses, "responses")
        if model is not None:
            df = df[df["model"] == model]
        self.kind = kind
        self.questions = {str(q) for q in df["question_id"]}
        self._by_text: dict[str, list[tuple[str, str, str]]] = {}
        for m, q, k, t in zip(df["model"], df["question_id"], df["_key"], df[KINDS[kind]]):
            if isinstance(t, str) and t.strip():
                self._by_text.setdefault(normalise_text(t), []).append((m, str(q), k))

    def _hits(self, text: str, question_id: str | None) -> list[tuple[str, str, str]]:
        hits = self._by_text.get(normalise_text(text), [])
        return hits if question_id is None else [h for h in hits if h[1] == question_id]

    def match(self, question_id: Any, text_a: str, text_b: str,
              columns: tuple[str, str] = ("text_a", "text_b")) -> str | Miss:
        """The pair id of the two texts (either order), or a `Miss` naming the column that was not found."""
        qid = None if question_id in (None, "") else str(question_id)
        where = "any question" if qid is None else f"question {qid!r}"
        if qid is not None and qid not in self.questions:
            return Miss(f"question_id {qid!r} is not a question of the responses")
        hits_a, hits_b = self._hits(text_a, qid), self._hits(text_b, qid)
        found = {}
        for m, q, ka in hits_a:
            for m2, q2, kb in hits_b:
                if (m, q) == (m2, q2) and ka != kb:
                    k1, k2 = sorted([ka, kb])
                    found[(m, q)] = pair_id(m, q, self.kind, k1, k2)
        if not found:
            missing = [c for c, h in zip(columns, (hits_a, hits_b)) if not h]
            what = " and ".join(missing) if missing else f"{columns[0]} and {columns[1]} together (two responses of one question)"
            return Miss(f"{what} not found among the {self.kind} texts of {where} in the responses")
        if len(found) > 1:
            named = ", ".join(f"{m}/{q}" for m, q in list(found)[:3])
            return Miss(f"the texts occur in {len(found)} questions/models ({named}); pass --model to choose one",
                        ambiguous=True)
        return next(iter(found.values()))


def check_against_pairs(pid: str, content_hash: Any, manifest: dict[str, dict]) -> Miss | None:
    """A Miss when the id is not in the exported pairs, or its texts changed since the export."""
    ref = manifest.get(pid)
    if ref is None:
        return Miss(f"unknown pair id {pid!r} in column 'pair_id' (not in the pairs file)")
    if content_hash and str(content_hash) != str(ref.get("content_hash")):
        return Miss(f"pair {pid!r}: column 'content_hash' {content_hash} differs from the pairs file "
                    f"({ref.get('content_hash')}): the texts changed since the export")
    return None


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and value != value):  # absent, or NaN from a table
        return None
    return value if isinstance(value, str) else str(value)


def check_texts(pair: dict[str, Any], manifest: dict[str, dict] | None,
                columns: tuple[str, str] = ("text_a", "text_b")) -> Miss | None:
    """A Miss when a row's two texts do not hash to its `content_hash` (or, when the row has none,
    to the pairs file's): the texts were edited after the export, and a label of them is not a
    label of the exported pair. Rows without both texts are not checked.

    A row read from a spreadsheet CSV carries `_raw_texts` (the cells as read): its texts are then
    the variant (`sage.annotation.cells.text_variants`) that matches the hash, i.e. the original texts."""
    expected = pair.get("content_hash")
    pid = pair.get("pair_id")
    if not expected and manifest is not None and pid is not None:
        expected = (manifest.get(str(pid)) or {}).get("content_hash")
    a, b = _text(pair.get("text_a")), _text(pair.get("text_b"))
    if not expected or a is None or b is None:
        return None
    raw = pair.get("_raw_texts")
    options_a, options_b = (text_variants(raw[0]), text_variants(raw[1])) if raw else ([a], [b])
    for ta in options_a:
        for tb in options_b:
            if content_hash(ta, tb) == str(expected):
                pair["text_a"], pair["text_b"] = ta, tb
                return None
    return Miss(f"pair {pid!r}: its texts ({columns[0]}, {columns[1]}) do not match its content_hash {expected}: "
                f"they were edited after the export; restore them, or export the pairs again and label those")


def question_sort_key(qid: str) -> tuple:
    """Numeric ids in numeric order, then the others alphabetically."""
    return (0, int(qid), "") if qid.isdigit() else (1, 0, qid)
