"""Read human labels: Label Studio JSON exports (JSON and JSON_MIN), wide CSVs with one column per
annotator, long CSV/JSONL (pair_id, annotator, label) and our pairs JSONL with a `labels` object.

Everything is reduced to one long table `pair_id, annotator, label, where` plus counts. Blank cells
(`NA`, `-`, empty) and cancelled Label Studio annotations are skips (counted per annotator). Rows are
tied to pairs by pair id (checked against the export's ids and content hashes) or, without one, by
their texts (see `sage.annotation.matching`). A row or task whose texts no longer hash to its
`content_hash` (edited after the export) matches no pair. A row that matches no pair stops the import
with one line naming file, row and column, or with `ignore_unknown` is skipped and counted with its
question id. CSV cells that the export neutralised against spreadsheet formulas are restored
(`sage.annotation.cells`); the content hash picks the exact original texts. Unreadable labels and
conflicting duplicates raise `SageInputError` naming the row and column; identical duplicates are
collapsed and counted. Nothing is dropped without being counted.
"""
from __future__ import annotations

import json
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sage.annotation.cells import restore
from sage.annotation.labels import (
    SCHEMES,
    check_scheme,
    detect_scheme,
    fits_scheme,
    normalise_label,
)
from sage.annotation.matching import (
    Miss,
    TextIndex,
    check_against_pairs,
    check_texts,
    is_local,
    local_pair_id,
    question_sort_key,
)
from sage.annotation.pairs import PAIR_COLUMNS
from sage.data import files
from sage.errors import SageInputError

log = logging.getLogger(__name__)

# Columns that describe a pair rather than hold an annotator's label (wide CSV files).
META_COLUMNS = set(PAIR_COLUMNS) | {
    "id", "task_id", "paraphrase_score", "annotation_id", "created_at", "updated_at", "lead_time",
    "prediction", "prediction_score", "notes", "comment", "comments", "sample", "paraphrase_id",
    "paraphrase", "paraphrased", "score",
}
TEXT_ALIASES = {
    "text_a": ("text_a", "model_output_1", "answer_1", "answer_a", "response_1", "rot_1"),
    "text_b": ("text_b", "model_output_2", "answer_2", "answer_b", "response_2", "rot_2"),
}
META_COLUMNS |= {a for v in TEXT_ALIASES.values() for a in v} | {"paraphrased_1", "paraphrased_2"}
# The SaGE authors' pair-metric columns (bleu_model_output, cosine_rot, ...) are not annotators either.
_PAIR_METRIC = re.compile(r"^(?:bleu|rouge\w*|bert\w*|cosine|sge)_(?:model_output|rot|answer)\w*$", re.IGNORECASE)
# Names that say "annotator": ann1..annN, annotator_alice, rater 2, judge_b, coder3, labeler1, worker_7.
_ANNOTATOR_NAME = re.compile(r"^(?:ann|annotator|rater|judge|coder|label+er|worker)(?:[\s_-]*\d+|[\s_-]+\w+)?$", re.IGNORECASE)


def detect_annotator_columns(columns: list[str]) -> tuple[list[str], list[str]]:
    """(annotator columns, other columns left out) of a wide table.

    Columns named like annotators (ann1, annotator_x, rater2, ...) are used when there are any, and
    the remaining non-pair columns are left out; otherwise every column that does not describe the
    pair holds one annotator's labels.
    """
    candidates = [c for c in map(str, columns)
                  if c not in META_COLUMNS and not _PAIR_METRIC.match(c) and not c.startswith("Unnamed")]
    named = [c for c in candidates if _ANNOTATOR_NAME.match(c)]
    if named:
        return named, [c for c in candidates if c not in named]
    return candidates, []


@dataclass
class LabelSet:
    labels: Any  # DataFrame: pair_id, annotator, label, where
    scheme: str
    pairs: Any  # DataFrame of pair metadata found in the file (pair_id + whatever is known)
    counts: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    @property
    def annotators(self) -> list[str]:
        return sorted(self.labels["annotator"].unique().tolist())


@dataclass
class _Raw:
    where: str  # file, row and column of the label (label errors)
    row: str  # file and row (pair errors: one row holds several annotators' labels)
    pair: dict[str, Any]  # pair_id (maybe None), content_hash, text_a, text_b, model, question_id, kind ...
    annotator: str
    value: Any  # raw label; None = skipped/cancelled
    columns: tuple[str, str] = ("text_a", "text_b")  # the file's columns that hold text_a, text_b
    miss: Miss | None = None  # set when the row matches no pair


def _load_json(path: Path) -> Any:
    try:
        return json.loads(files.read_text(path, empty_hint="export the labels again"))
    except json.JSONDecodeError as exc:
        raise SageInputError(f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


def read_label_table(path: Path):
    """A CSV/JSONL pairs or labels table as a DataFrame of strings (errors name the file)."""
    return files.read_table(path, as_strings=True, empty_hint="export the labels again")


def _ls_annotator(ann: dict) -> str:
    who = ann.get("completed_by")
    if isinstance(who, dict):
        return str(who.get("email") or f"user{who.get('id')}")
    return f"user{who}" if who is not None else "unknown"


def _ls_choice(result: list, where: str) -> Any:
    choices = [r for r in result if isinstance(r, dict) and r.get("type") == "choices"]
    if len(choices) > 1:
        named = [r for r in choices if r.get("from_name") == "label"]
        choices = named or choices
    if not choices:
        return None
    picked = (choices[0].get("value") or {}).get("choices") or []
    if len(picked) > 1:
        raise SageInputError(f"{where}: {len(picked)} choices {picked} in one annotation; use single choice")
    return picked[0] if picked else None


def _from_labelstudio(path: Path, counts: Counter) -> list[_Raw]:
    data = _load_json(path)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise SageInputError(f"{path}: expected a Label Studio export (a JSON list of tasks)")
    raws: list[_Raw] = []
    for t, task in enumerate(data):
        where = f"{path}: task {t + 1}"
        if not isinstance(task, dict):
            raise SageInputError(f"{where}: expected an object, got {type(task).__name__}")
        if "annotations" not in task and "data" not in task:  # JSON_MIN: one flat record per task
            pair = {k: task.get(k) for k in ("pair_id", "content_hash", "text_a", "text_b", "model", "question_id", "kind")}
            value = task.get("label")
            raws.append(_Raw(where, where, pair, str(task.get("annotator", "unknown")), value))
            continue
        pair = dict(task.get("data") or {})
        anns = task.get("annotations") or task.get("completions") or []
        if not anns:
            counts["tasks_without_annotations"] += 1
            raws.append(_Raw(where, where, pair, "", None))
            continue
        for a, ann in enumerate(anns):
            w = f"{where} annotation {a + 1}"
            who = _ls_annotator(ann)
            if ann.get("was_cancelled"):
                counts["cancelled"] += 1
                raws.append(_Raw(w, where, pair, who, None))
                continue
            raws.append(_Raw(w, where, pair, who, _ls_choice(ann.get("result") or [], w)))
    return raws


def _pair_fields(rec: dict, kind: str = "answer", spreadsheet: bool = False) -> tuple[dict[str, Any], tuple[str, str]]:
    """The pair columns of one record (texts under any alias) and the names of the text columns used.

    A sheet with answers and RoTs side by side (model_output_1, rot_1, ...) gives its RoTs for kind rot.
    `spreadsheet` (a CSV): cells the export neutralised are restored (`sage.annotation.cells`) and the
    texts as read are kept under `_raw_texts` for `check_texts`."""
    pair = {k: rec.get(k) for k in ("pair_id", "content_hash", "model", "question_id", "kind", "question")}
    used = []
    for canon, aliases in TEXT_ALIASES.items():
        if kind == "rot":
            aliases = sorted(aliases, key=lambda a: not a.startswith("rot_"))
        name = next((a for a in aliases if rec.get(a) not in (None, "")), aliases[0])
        pair[canon] = rec.get(name)
        used.append(name)
    pair = {k: (None if v == "" else v) for k, v in pair.items()}
    if spreadsheet:
        raw = (pair["text_a"], pair["text_b"])
        pair = {k: restore(v) for k, v in pair.items()}
        pair["_raw_texts"] = raw
    return pair, (used[0], used[1])


def _line(path: Path, i: int) -> str:
    """Where record i sits: CSV rows count the header as row 1 (spreadsheet numbering), JSONL lines from 1."""
    return f"line {i + 1}" if path.suffix.lower() == ".jsonl" else f"row {i + 2}"


def _annotator_columns(path: Path, cols: list[str], given: list[str] | None, counts: Counter) -> list[str]:
    if given:
        missing = [c for c in given if c not in cols]
        if missing:
            raise SageInputError(f"{path}: annotator column(s) {missing} not found; columns are {cols}")
        return list(given)
    found, left_out = detect_annotator_columns(cols)
    if not found:
        raise SageInputError(
            f"{path}: no annotator columns; add one column per annotator (e.g. ann1, ann2, ...; any name other "
            f"than the pair columns {sorted(PAIR_COLUMNS)}) or pass --annotator-columns"
        )
    if left_out:
        counts["columns_left_out"] = left_out
        log.info("%s: annotator columns %s; other columns left out: %s", path, found, left_out)
    return found


def _from_table(path: Path, counts: Counter, annotator_columns: list[str] | None, kind: str) -> list[_Raw]:
    df = read_label_table(path)
    if df.empty:
        raise SageInputError(f"{path}: no rows; export the labels again")
    cols = list(df.columns)
    raws: list[_Raw] = []
    sheet = path.suffix.lower() == ".csv"
    if {"annotator", "label"} <= set(cols):  # long format
        for i, rec in enumerate(df.to_dict(orient="records")):
            where = f"{path}: {_line(path, i)}"
            pair, used = _pair_fields(rec, kind, sheet)
            raws.append(_Raw(where, where, pair, str(rec["annotator"]), rec["label"], used))
        return raws
    if "labels" in cols:  # our JSONL with {"labels": {annotator: label}}
        for i, rec in enumerate(df.to_dict(orient="records")):
            labels = rec.get("labels")
            if not isinstance(labels, dict):
                raise SageInputError(f"{path}: line {i + 1}: 'labels' must be an object {{annotator: label}}")
            pair, used = _pair_fields(rec, kind, sheet)
            for who, value in labels.items():
                raws.append(_Raw(f"{path}: line {i + 1} annotator {who!r}", f"{path}: line {i + 1}", pair, str(who),
                                 value, used))
        return raws
    ann_cols = _annotator_columns(path, cols, annotator_columns, counts)
    counts["annotator_columns"] = ann_cols
    for i, rec in enumerate(df.to_dict(orient="records")):
        pair, used = _pair_fields(rec, kind, sheet)
        for c in ann_cols:
            raws.append(_Raw(f"{path}: row {i + 2} column {c!r}", f"{path}: row {i + 2}", pair, str(c), rec[c], used))
    return raws


def _read_raws(path: Path, counts: Counter, annotator_columns: list[str] | None, kind: str) -> list[_Raw]:
    suffix = path.suffix.lower()
    if suffix == ".json":
        raws = _from_labelstudio(path, counts)
    elif suffix in (".csv", ".jsonl"):
        raws = _from_table(path, counts, annotator_columns, kind)
    else:
        raise SageInputError(f"{path}: unknown labels format {suffix!r}; use .json (Label Studio), .csv or .jsonl")
    if not raws:
        raise SageInputError(f"{path}: no tasks or rows found")
    return raws


def _to_manifest(pairs) -> dict[str, dict]:
    return {str(r["pair_id"]): r for r in pairs.to_dict(orient="records")}


def _choose_scheme(raws: list[_Raw], scheme: str | None, path: Path) -> str:
    """The given scheme, or the one every label fits; else one line naming the first cell that fits neither."""
    if scheme is not None:
        return check_scheme(scheme)
    try:
        return detect_scheme([r.value for r in raws], str(path))
    except SageInputError:
        best = max(SCHEMES, key=lambda s: sum(fits_scheme(r.value, s) for r in raws))
        for r in raws:
            normalise_label(r.value, best, r.where)  # raises at the first label that is not a `best` label
        raise


def _needs_text_match(r: _Raw, have_responses: bool) -> bool:
    pid = r.pair.get("pair_id")
    return not pid or (is_local(pid) and have_responses)


def _match_texts(rows: list[_Raw], responses, kind: str, model: str | None, counts: Counter) -> None:
    """Pair ids for rows that carry texts but no pair id: from the responses, else local ids."""
    bad = next((r for r in rows if not (r.pair.get("text_a") and r.pair.get("text_b"))), None)
    if bad is not None:
        raise SageInputError(f"{bad.row}: no pair_id and no texts ({bad.columns[0]}, {bad.columns[1]}); "
                             f"add the pair_id column from the export or the two answer texts")
    index = TextIndex(responses, kind, model) if responses is not None else None
    found: dict[tuple, str | Miss] = {}
    for r in rows:
        key = (r.pair.get("question_id"), r.pair["text_a"], r.pair["text_b"])
        if key not in found:
            found[key] = index.match(*key, columns=r.columns) if index else local_pair_id(*key)
        hit = found[key]
        if isinstance(hit, Miss):
            if hit.ambiguous:
                raise SageInputError(f"{r.row}: {hit.reason}")
            r.miss = hit
        else:
            r.pair["pair_id"] = hit
    ok = len({v for v in found.values() if not isinstance(v, Miss)})  # distinct pairs
    counts["matched_by_text" if index is not None else "local_pair_ids"] = ok


def _resolve_pairs(raws: list[_Raw], manifest, responses, kind: str, model: str | None, counts: Counter) -> None:
    """Give every raw a pair id, or a `Miss` saying why it has none (texts edited since the export
    included: `check_texts`)."""
    checked: dict[int, Miss | None] = {}
    for r in raws:  # one check per row or task, whatever its number of annotators
        if id(r.pair) not in checked:
            checked[id(r.pair)] = check_texts(r.pair, manifest, r.columns)
        r.miss = checked[id(r.pair)]
    text_rows = [r for r in raws if r.miss is None and _needs_text_match(r, responses is not None)]
    if text_rows:
        if responses is None and manifest is not None:
            raise SageInputError(f"{text_rows[0].row}: rows have texts but no pair_id; "
                                 f"pass --responses to match them by text")
        _match_texts(text_rows, responses, kind, model, counts)
    if manifest is not None:
        for r in raws:
            if r.miss is None:
                r.miss = check_against_pairs(str(r.pair["pair_id"]), r.pair.get("content_hash"), manifest)


def _drop_unmatched(raws: list[_Raw], ignore_unknown: bool, counts: Counter) -> list[_Raw]:
    """Stop at the first row that matches no pair, or (ignore_unknown) skip and count all of them."""
    missed = [r for r in raws if r.miss is not None]
    rows: dict[str, _Raw] = {}
    for r in missed:
        rows.setdefault(r.row, r)  # file order; one entry per row whatever its number of annotators
    qids = {str(r.pair["question_id"]) for r in missed if r.pair.get("question_id") not in (None, "")}
    counts["unmatched"] = {
        "rows": len(rows), "cells": sum(1 for r in missed if r.annotator),
        "question_ids": sorted(qids, key=question_sort_key),
        "examples": [f"{row}: {r.miss.reason}" for row, r in list(rows.items())[:5]],
    }
    if not missed:
        return raws
    if not ignore_unknown:
        r = missed[0]
        raise SageInputError(f"{r.row}: {r.miss.reason}; use the labels that belong to these pairs/responses, "
                             f"or pass --ignore-unknown to skip and count such rows")
    log.warning("skipped %s", unmatched_note(counts))
    return [r for r in raws if r.miss is None]


def unmatched_note(counts: dict[str, Any]) -> str | None:
    """One line on the label rows skipped because they match no pair (None when there are none)."""
    u = counts.get("unmatched") or {}
    if not u.get("rows"):
        return None
    qids = u["question_ids"]
    more = f" ... ({len(qids)} questions)" if len(qids) > 20 else ""
    where = f"question_id {', '.join(qids[:20])}{more}" if qids else "no question_id given"
    return f"{u['rows']} label rows ({u['cells']} label cells) that match no pair, {where}; first: {u['examples'][0]}"


def _collect(raws: list[_Raw], scheme: str, counts: Counter):
    """Long label rows, pair metadata seen, skipped (blank) labels per annotator."""
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    meta: dict[str, dict] = {}
    skipped: Counter = Counter()
    rows = []
    for r in raws:
        pid = str(r.pair["pair_id"])
        meta.setdefault(pid, {k: v for k, v in r.pair.items() if v is not None and k in PAIR_COLUMNS})
        if not r.annotator:
            counts["unlabelled_rows"] += 1
            continue
        label = normalise_label(r.value, scheme, r.where)
        if label is None:
            skipped[r.annotator] += 1
            continue
        key = (pid, r.annotator)
        if key in seen:
            if seen[key][0] != label:
                raise SageInputError(
                    f"{r.where}: annotator {r.annotator!r} labels pair {pid!r} {label!r} but "
                    f"{seen[key][1]} says {seen[key][0]!r}; keep one label per annotator and pair"
                )
            counts["duplicates_collapsed"] += 1
            continue
        seen[key] = (label, r.where)
        rows.append({"pair_id": pid, "annotator": r.annotator, "label": label, "where": r.where})
    return rows, meta, skipped


def read_labels(
    path: Path,
    pairs=None,
    responses=None,
    scheme: str | None = None,
    annotator_columns: list[str] | None = None,
    ignore_unknown: bool = False,
    kind: str = "answer",
    model: str | None = None,
) -> LabelSet:
    """Read one labels file. `pairs`: the exported pairs table (checks ids and hashes);
    `responses`: the responses table, used to match rows that carry texts but no pair ids."""
    import pandas as pd

    path = Path(path)
    counts: Counter = Counter()
    raws = _read_raws(path, counts, annotator_columns, kind)
    n_read = len(raws)
    scheme = _choose_scheme(raws, scheme, path)
    manifest = _to_manifest(pairs) if pairs is not None else None
    _resolve_pairs(raws, manifest, responses, kind, model, counts)
    raws = _drop_unmatched(raws, ignore_unknown, counts)
    if not raws:
        raise SageInputError(f"{path}: no label row matches a pair; first: {counts['unmatched']['examples'][0]}")
    rows, meta, skipped = _collect(raws, scheme, counts)
    if not rows:
        raise SageInputError(f"{path}: every label is blank or cancelled; nothing to import")
    labels = pd.DataFrame(rows)
    meta_df = pd.DataFrame([{"pair_id": k, **{c: v for c, v in m.items() if c != "pair_id"}} for k, m in meta.items()])
    if manifest is not None:
        ref_df = pairs.copy()
        ref_df["pair_id"] = ref_df["pair_id"].astype(str)
        keep = [c for c in PAIR_COLUMNS if c in ref_df.columns]
        meta_df = ref_df.loc[ref_df["pair_id"].isin(meta_df["pair_id"]), keep].reset_index(drop=True)
        counts["pairs_in_manifest_without_labels"] = int((~ref_df["pair_id"].isin(labels["pair_id"])).sum())
    labelled = set(labels["pair_id"])
    counts = dict(counts)
    counts.update({
        "rows_read": n_read,
        "labels": len(labels),
        "pairs_labelled": len(labelled),
        "pairs_seen_without_any_label": int(sum(1 for p in meta if p not in labelled)),
        "skipped_by_annotator": dict(sorted(skipped.items())),
        "labels_by_annotator": dict(sorted(Counter(labels["annotator"]).items())),
    })
    result = LabelSet(labels, scheme, meta_df, counts, str(path))
    log.info("%s: %d labels from %d annotators on %d pairs (%s)", path, len(labels),
             labels["annotator"].nunique(), len(labelled), scheme)
    return result


def read_pairs(path: Path):
    """The exported pairs table (pairs.csv or pairs.jsonl); checks the columns import needs."""
    df = read_label_table(Path(path))
    for col in ("pair_id", "content_hash", "model", "question_id"):
        if col not in df.columns:
            raise SageInputError(f"{path}: missing column {col!r}; pass the pairs.csv/pairs.jsonl written by 'sage annotate export'")
    if df["pair_id"].duplicated().any():
        dup = df["pair_id"][df["pair_id"].duplicated()].iloc[0]
        raise SageInputError(f"{path}: pair id {dup!r} occurs twice; use the unmodified export file")
    sheet = Path(path).suffix.lower() == ".csv"
    raw = df
    if sheet:  # pairs.csv: the cells the export neutralised, restored
        df = df.map(restore)
    if {"text_a", "text_b"} <= set(df.columns):  # the texts must be those the hashes were made of
        texts = []
        for i, (rec, ra, rb) in enumerate(zip(df[["pair_id", "content_hash", "text_a", "text_b"]].to_dict(
                orient="records"), raw["text_a"], raw["text_b"])):
            if sheet:
                rec["_raw_texts"] = (ra, rb)
            miss = check_texts(rec, None)
            if miss is not None:
                raise SageInputError(f"{path}: {_line(Path(path), i)}: {miss.reason}; use the unmodified export file")
            texts.append((rec["text_a"], rec["text_b"]))
        df["text_a"], df["text_b"] = [t[0] for t in texts], [t[1] for t in texts]
    df["model"] = df["model"].fillna("").astype(str)
    return df
