"""Read human labels: Label Studio JSON exports (JSON and JSON_MIN), wide CSVs with one column per
annotator, long CSV/JSONL (pair_id, annotator, label) and our pairs JSONL with a `labels` object.

Everything is reduced to one long table `pair_id, annotator, label, where` plus counts. Blank cells
and cancelled Label Studio annotations are skips (counted per annotator). Unknown pair ids, content
hash mismatches, unreadable labels and conflicting duplicates raise `SageInputError` naming the row;
identical duplicates are collapsed and counted. Nothing is dropped without being counted.
"""
from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sage.annotation.labels import check_scheme, detect_scheme, normalise_label
from sage.annotation.pairs import PAIR_COLUMNS, match_by_text
from sage.data import files
from sage.errors import SageInputError

log = logging.getLogger(__name__)

# Columns that describe a pair rather than hold an annotator's label (wide CSV files).
META_COLUMNS = set(PAIR_COLUMNS) | {
    "id", "task_id", "paraphrase_score", "annotation_id", "created_at", "updated_at", "lead_time",
    "prediction", "prediction_score", "notes", "comment", "comments", "sample", "paraphrase_id",
}
TEXT_ALIASES = {
    "text_a": ("text_a", "model_output_1", "answer_1", "answer_a", "response_1", "rot_1"),
    "text_b": ("text_b", "model_output_2", "answer_2", "answer_b", "response_2", "rot_2"),
}
META_COLUMNS |= {a for v in TEXT_ALIASES.values() for a in v} | {"paraphrased_1", "paraphrased_2"}


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
    where: str
    pair: dict[str, Any]  # pair_id (maybe None), content_hash, text_a, text_b, model, question_id, kind ...
    annotator: str
    value: Any  # raw label; None = skipped/cancelled


def _load_json(path: Path) -> Any:
    try:
        return json.loads(files.read_text(path, empty_hint="export the labels again"))
    except json.JSONDecodeError as exc:
        raise SageInputError(f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


def read_table(path: Path):
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
            raws.append(_Raw(where, pair, str(task.get("annotator", "unknown")), value))
            continue
        pair = dict(task.get("data") or {})
        anns = task.get("annotations") or task.get("completions") or []
        if not anns:
            counts["tasks_without_annotations"] += 1
            raws.append(_Raw(where, pair, "", None))
            continue
        for a, ann in enumerate(anns):
            w = f"{where} annotation {a + 1}"
            who = _ls_annotator(ann)
            if ann.get("was_cancelled"):
                counts["cancelled"] += 1
                raws.append(_Raw(w, pair, who, None))
                continue
            raws.append(_Raw(w, pair, who, _ls_choice(ann.get("result") or [], w)))
    return raws


def _pair_fields(rec: dict) -> dict[str, Any]:
    pair = {k: rec.get(k) for k in ("pair_id", "content_hash", "model", "question_id", "kind", "question")}
    for canon, aliases in TEXT_ALIASES.items():
        pair[canon] = next((rec[a] for a in aliases if rec.get(a) not in (None, "")), None)
    return {k: (None if v == "" else v) for k, v in pair.items()}


def _line(path: Path, i: int) -> str:
    """Where record i sits: CSV rows count the header as row 1 (spreadsheet numbering), JSONL lines from 1."""
    return f"line {i + 1}" if path.suffix.lower() == ".jsonl" else f"row {i + 2}"


def _from_table(path: Path, counts: Counter, annotator_columns: list[str] | None) -> list[_Raw]:
    df = read_table(path)
    if df.empty:
        raise SageInputError(f"{path}: no rows; export the labels again")
    cols = list(df.columns)
    raws: list[_Raw] = []
    if {"annotator", "label"} <= set(cols):  # long format
        for i, rec in enumerate(df.to_dict(orient="records")):
            raws.append(_Raw(f"{path}: {_line(path, i)}", _pair_fields(rec), str(rec["annotator"]), rec["label"]))
        return raws
    if "labels" in cols:  # our JSONL with {"labels": {annotator: label}}
        for i, rec in enumerate(df.to_dict(orient="records")):
            labels = rec.get("labels")
            if not isinstance(labels, dict):
                raise SageInputError(f"{path}: line {i + 1}: 'labels' must be an object {{annotator: label}}")
            for who, value in labels.items():
                raws.append(_Raw(f"{path}: line {i + 1} annotator {who!r}", _pair_fields(rec), str(who), value))
        return raws
    if annotator_columns:
        missing = [c for c in annotator_columns if c not in cols]
        if missing:
            raise SageInputError(f"{path}: annotator column(s) {missing} not found; columns are {cols}")
        ann_cols = list(annotator_columns)
    else:
        ann_cols = [c for c in cols if c not in META_COLUMNS and not str(c).startswith("Unnamed")]
    if not ann_cols:
        raise SageInputError(
            f"{path}: no annotator columns; add one column per annotator (any name other than {sorted(PAIR_COLUMNS)}) "
            f"or pass --annotator-columns"
        )
    counts["annotator_columns"] = ann_cols
    for i, rec in enumerate(df.to_dict(orient="records")):
        pair = _pair_fields(rec)
        for c in ann_cols:
            raws.append(_Raw(f"{path}: row {i + 2} column {c!r}", pair, str(c), rec[c]))
    return raws


def _to_manifest(pairs) -> dict[str, dict]:
    return {str(r["pair_id"]): r for r in pairs.to_dict(orient="records")}


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
    suffix = path.suffix.lower()
    if suffix == ".json":
        raws = _from_labelstudio(path, counts)
    elif suffix in (".csv", ".jsonl"):
        raws = _from_table(path, counts, annotator_columns)
    else:
        raise SageInputError(f"{path}: unknown labels format {suffix!r}; use .json (Label Studio), .csv or .jsonl")
    if not raws:
        raise SageInputError(f"{path}: no tasks or rows found")
    manifest = _to_manifest(pairs) if pairs is not None else None

    # Pair ids for rows that only carry texts (outside files).
    need = [r for r in raws if not r.pair.get("pair_id")]
    if need:
        if any(not (r.pair.get("text_a") and r.pair.get("text_b")) for r in need):
            bad = next(r for r in need if not (r.pair.get("text_a") and r.pair.get("text_b")))
            raise SageInputError(f"{bad.where}: no pair_id and no text_a/text_b; add the pair_id column from the export")
        if responses is None:
            raise SageInputError(f"{need[0].where}: rows have texts but no pair_id; pass --responses to match them by text")
        uniq = {(r.pair["text_a"], r.pair["text_b"]) for r in need}
        frame = pd.DataFrame(sorted(uniq), columns=["text_a", "text_b"])
        ids = dict(zip(map(tuple, frame.values.tolist()), match_by_text(frame, responses, kind, model, str(path))))
        for r in need:
            r.pair["pair_id"] = ids[(r.pair["text_a"], r.pair["text_b"])]
        counts["matched_by_text"] = len(uniq)

    if scheme is None:
        scheme = detect_scheme([r.value for r in raws], str(path))
    check_scheme(scheme)

    seen: dict[tuple[str, str], tuple[str, str]] = {}
    meta: dict[str, dict] = {}
    skipped: Counter = Counter()
    rows = []
    for r in raws:
        pid = str(r.pair["pair_id"])
        if manifest is not None:
            ref = manifest.get(pid)
            if ref is None:
                if ignore_unknown:
                    counts["unknown_pair_rows"] += 1
                    continue
                raise SageInputError(
                    f"{r.where}: unknown pair id {pid!r} (not in the pairs file); use the labels that belong to "
                    f"this export or pass --ignore-unknown to skip and count such rows"
                )
            h = r.pair.get("content_hash")
            if h and str(h) != str(ref.get("content_hash")):
                raise SageInputError(
                    f"{r.where}: pair {pid!r}: content hash {h} differs from the pairs file "
                    f"({ref.get('content_hash')}); the texts changed since export: re-export and re-annotate"
                )
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
        "rows_read": len(raws),
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
    df = read_table(Path(path))
    for col in ("pair_id", "content_hash", "model", "question_id"):
        if col not in df.columns:
            raise SageInputError(f"{path}: missing column {col!r}; pass the pairs.csv/pairs.jsonl written by 'sage annotate export'")
    if df["pair_id"].duplicated().any():
        dup = df["pair_id"][df["pair_id"].duplicated()].iloc[0]
        raise SageInputError(f"{path}: pair id {dup!r} occurs twice; use the unmodified export file")
    df["model"] = df["model"].fillna("").astype(str)
    return df
