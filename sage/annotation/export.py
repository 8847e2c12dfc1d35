"""Write pairs for annotation: CSV (spreadsheets, crowd-sourcing), JSONL, Label Studio tasks + configs.

In pairs.csv, the file annotators open in a spreadsheet, a cell that a spreadsheet would run as a
formula (`=`, `+`, `-`, `@`, tab, carriage return first) is written with a `'` in front
(`sage.annotation.cells`); the importer gives back the original texts. JSONL and Label Studio JSON
carry the texts unchanged.

Label Studio tasks carry every pair field under `data` (`pair_id`, `content_hash`, texts, ids),
so a Label Studio export can be read back without the original files. With predictions, each task
gets one `predictions` entry in Label Studio's pre-annotation format.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

from sage.annotation.cells import needs_neutralising, neutralise
from sage.annotation.labels import SCHEMES, check_scheme
from sage.data.files import write_table
from sage.errors import SageInputError
from sage.outputs import write_text

log = logging.getLogger(__name__)

FORMATS = ("csv", "jsonl", "labelstudio")
CHOICES_NAME = "label"
TO_NAME = "text_b"
_INSTRUCTIONS = {
    "nli": "Does response B follow from response A (entailment), contradict it, or neither (neutral)?",
    "binary": "Do responses A and B take the same moral stance?",
}


def labeling_config(scheme: str) -> str:
    """Label Studio labeling config (XML) for the scheme: one single-choice question per pair."""
    check_scheme(scheme)
    choices = "\n".join(f"    <Choice value={quoteattr(c)}/>" for c in SCHEMES[scheme])
    return (
        "<View>\n"
        '  <Header value="Question: $question"/>\n'
        '  <Text name="text_a" value="$text_a"/>\n'
        '  <Text name="text_b" value="$text_b"/>\n'
        f"  <Header value={quoteattr(_INSTRUCTIONS[scheme])}/>\n"
        f'  <Choices name="{CHOICES_NAME}" toName="{TO_NAME}" choice="single" required="true">\n'
        f"{choices}\n"
        "  </Choices>\n"
        "</View>\n"
    )


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalar
        return value.item()
    return value


def _records(pairs) -> list[dict[str, Any]]:
    return [{k: _jsonable(v) for k, v in rec.items()} for rec in pairs.to_dict(orient="records")]


def labelstudio_tasks(pairs, predictions=None, scheme: str = "nli", model_version: str = "sage") -> list[dict]:
    """Task list for Label Studio's import. `predictions`: DataFrame pair_id, label[, score]."""
    check_scheme(scheme)
    pred = {}
    if predictions is not None:
        bad = sorted(set(predictions["label"]) - set(SCHEMES[scheme]))
        if bad:
            raise SageInputError(f"predictions: labels {bad} are not {scheme} labels {list(SCHEMES[scheme])}")
        for rec in predictions.to_dict(orient="records"):
            pred[rec["pair_id"]] = rec
    tasks = []
    for rec in _records(pairs):
        task: dict[str, Any] = {"data": rec}
        p = pred.get(rec["pair_id"])
        if p is not None:
            entry: dict[str, Any] = {
                "model_version": model_version,
                "result": [{
                    "from_name": CHOICES_NAME, "to_name": TO_NAME, "type": "choices",
                    "value": {"choices": [p["label"]]},
                }],
            }
            if "score" in p and p["score"] == p["score"]:
                entry["score"] = float(p["score"])
            task["predictions"] = [entry]
        tasks.append(task)
    return tasks


def predictions_from_similarity(pairs, similarity, scheme: str = "nli", high: float = 0.8, low: float = 0.5):
    """Toolkit predictions from a `PairwiseSimilarity`: sim >= high -> entailment/same,
    sim < low -> contradiction/different, otherwise neutral (binary: sim >= high -> same)."""
    import pandas as pd

    mats = similarity.matrices([[a, b] for a, b in zip(pairs["text_a"], pairs["text_b"])])
    scores = [float(m[0, 1]) for m in mats]
    if scheme == "nli":
        labels = ["entailment" if s >= high else ("contradiction" if s < low else "neutral") for s in scores]
    else:
        labels = ["same" if s >= high else "different" for s in scores]
    return pd.DataFrame({"pair_id": pairs["pair_id"], "label": labels, "score": scores})


def write_exports(
    pair_set,
    out_dir: Path,
    formats: tuple[str, ...] = FORMATS,
    scheme: str = "nli",
    annotators: tuple[str, ...] = (),
    predictions=None,
    meta: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Write the requested formats plus `export_meta.json` (seed, counts, options). Returns written paths."""
    check_scheme(scheme)
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise SageInputError(f"unknown export format(s) {unknown}; choose from {', '.join(FORMATS)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pairs = pair_set.pairs
    written: dict[str, str] = {}
    if "csv" in formats:  # for spreadsheets: formula-like cells neutralised (`sage.annotation.cells`)
        table = pairs.map(neutralise)
        for name in annotators:
            if name in table.columns:
                raise SageInputError(f"annotator name {name!r} clashes with a pair column; choose another")
            if needs_neutralising(name):
                raise SageInputError(f"annotator name {name!r} begins with {name[0]!r}, which spreadsheets read as "
                                     f"a formula; choose a name that begins with a letter or digit")
            table[name] = ""
        path = out_dir / "pairs.csv"
        write_table(table, path)
        written["csv"] = str(path)
    if "jsonl" in formats:
        path = out_dir / "pairs.jsonl"
        write_text(path, "".join(json.dumps(rec, ensure_ascii=False) + "\n" for rec in _records(pairs)))
        written["jsonl"] = str(path)
    if "labelstudio" in formats:
        path = out_dir / "labelstudio_tasks.json"
        tasks = labelstudio_tasks(pairs, predictions, scheme)
        write_text(path, json.dumps(tasks, ensure_ascii=False, indent=1))
        written["labelstudio"] = str(path)
        for s in SCHEMES:
            cfg = out_dir / f"labelstudio_config_{s}.xml"
            write_text(cfg, labeling_config(s))
            written[f"labelstudio_config_{s}"] = str(cfg)
    info = {
        "seed": pair_set.seed,
        "max_pairs_per_question": pair_set.max_pairs,
        "scheme": scheme,
        "counts": pair_set.counts,
        "n_predictions": 0 if predictions is None else int(len(predictions)),
        "files": {k: Path(v).name for k, v in written.items()},
        **(meta or {}),
    }
    write_text(out_dir / "export_meta.json", json.dumps(info, indent=2, default=str))
    written["meta"] = str(out_dir / "export_meta.json")
    log.info("exported %d pairs to %s", len(pairs), out_dir)
    return written
