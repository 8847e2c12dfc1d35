"""The SaGE authors' pair layout: one row per answer pair, read back into one row per node.

    question_id, paraphrased_1, model_output_1, rot_1, paraphrased_2, model_output_2, rot_2,
    bleu_model_output, rouge_model_output, cosine_model_output, ..., bleu_rot, ...

(`q100_gpt_3.5_edges.csv` and the per-model files under `data/responses/` of priyanshul-govil/SaGE;
`answer_1`/`answer_2`, `paraphrase_1`/`paraphrase_2` are read too.) The nodes of a question are
its distinct (paraphrase, answer, RoT) triples in order of first appearance; every pair's two
triples are nodes by construction. The pairs must form the complete graph on those nodes, each
unordered pair once: a question where they do not is reported (`PairEdges.incomplete`) and its
precomputed edges are not used. Numeric columns of the file are kept per node pair
(`PairEdges`), so SGE can be built over a similarity the authors computed (`--sge-edges
column:cosine_model_output`), e.g. with an encoder that is not available offline.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from sage.errors import SageInputError

_SIDES = {  # canonical text column -> accepted (first, second) column names
    "answer": (("model_output_1", "model_output_2"), ("answer_1", "answer_2")),
    "paraphrase": (("paraphrased_1", "paraphrased_2"), ("paraphrase_1", "paraphrase_2")),
    "rot": (("rot_1", "rot_2"),),
}


def _columns(df: pd.DataFrame) -> dict[str, tuple[str, str]]:
    found = {}
    for canon, options in _SIDES.items():
        for a, b in options:
            if a in df.columns and b in df.columns:
                found[canon] = (a, b)
                break
    return found


def is_pair_layout(df: pd.DataFrame) -> bool:
    return "answer" in _columns(df)


@dataclass
class PairEdges:
    """Numeric pair columns of a pair-layout file, per (model, question_id) and node pair."""

    columns: list[str]
    # keyed by (model, question_id); model is None when the file has no model column
    values: dict[tuple[str | None, str], dict[tuple[int, int], dict[str, float]]] = field(default_factory=dict)
    incomplete: dict[tuple[str | None, str], str] = field(default_factory=dict)  # -> why
    # node-table row -> {text column: ("line L", the pair file's column)} of its empty cells
    empty_cells: dict[int, dict[str, tuple[str, str]]] = field(default_factory=dict)
    # (model, question_id, column) -> "line L" of the first pair whose value there is NaN or infinite
    non_finite: dict[tuple[str | None, str, str], str] = field(default_factory=dict)
    source: str = ""

    def locate(self, row: int, column: str) -> tuple[str, str] | None:
        """Where node-table `row`'s empty `column` is in the pair file (None: not empty there)."""
        return self.empty_cells.get(row, {}).get(column)

    def _key(self, model: str, qid: str) -> tuple[str | None, str]:
        return (model, qid) if (model, qid) in self.values else (None, qid)

    def problem(self, model: str, qid: str) -> str | None:
        return self.incomplete.get(self._key(model, qid))

    def similarity(self, column: str, model: str, qid: str, nodes) -> np.ndarray | None:
        """The n x n similarity matrix of `column` over `nodes` (node ids, in row order), with 1 on
        the diagonal; None where the question's pairs are incomplete or a value is missing. A NaN or
        infinite value in `column` is bad input (SageInputError naming its line), never a silently
        dropped question."""
        key = self._key(model, qid)
        if key in self.incomplete:
            return None
        where = self.non_finite.get((*key, column))
        if where is not None:
            raise SageInputError(f"{self.source}: {where}: column '{column}' of question {qid} is not a finite "
                                 "number (NaN or infinite); give every pair a finite value or drop the question")
        pairs = self.values.get(key, {})
        n = len(nodes)
        mat = np.eye(n)
        for i in range(n):
            for j in range(i + 1, n):
                value = pairs.get((min(nodes[i], nodes[j]), max(nodes[i], nodes[j])), {}).get(column)
                if value is None or not math.isfinite(value):
                    return None
                mat[i, j] = mat[j, i] = value
        return mat


def record_lines(source: str, n: int) -> list[str]:
    """For each of the `n` data records of the file `source`, where it starts: "line L" (CSV records
    can span lines, so the line is counted by the csv reader); "pair row i" when `source` is not a
    readable CSV/JSONL file (a DataFrame given in memory)."""

    path = Path(source)
    starts: list[int] = []
    try:
        if path.suffix.lower() == ".csv":
            with open(path, encoding="utf-8-sig", newline="") as fh:
                reader = csv.reader(fh)
                next(reader, None)
                line = reader.line_num + 1
                for _ in reader:
                    starts.append(line)
                    line = reader.line_num + 1
        elif path.suffix.lower() in (".jsonl", ".json"):
            with open(path, encoding="utf-8-sig") as fh:
                starts = [i for i, text in enumerate(fh, 1) if text.strip()]
    except (OSError, UnicodeDecodeError, csv.Error):
        starts = []
    if len(starts) != n:
        return [f"pair row {i + 1}" for i in range(n)]
    return [f"line {line}" for line in starts]


def nodes_from_pairs(df: pd.DataFrame, source: str) -> tuple[pd.DataFrame, PairEdges]:
    """One row per node (question_id, [model,] paraphrase_id, paraphrase, sample, answer, rot,
    node) and the pair values. Node ids are 0-based per question; `paraphrase_id` numbers the
    distinct paraphrases, `sample` the nodes that share one."""
    cols = _columns(df)
    if "question_id" not in df.columns:
        raise SageInputError(f"{source}: a pair-layout file needs a 'question_id' column (found {list(df.columns)}); "
                             "add the id of each pair's question")
    texts = [c for c in ("paraphrase", "answer", "rot") if c in cols]
    used = {c for pair in cols.values() for c in pair} | {"question_id", "model", "question"}
    numeric = [c for c in df.columns if c not in used and pd.api.types.is_numeric_dtype(df[c])]
    has_model = "model" in df.columns
    lines = record_lines(source, len(df))
    blank = df["question_id"].isna() | df["question_id"].astype(str).str.strip().eq("")
    if blank.any():
        raise SageInputError(f"{source}: {lines[int(blank.to_numpy().nonzero()[0][0])]}: column 'question_id' is empty; "
                             "fill in the id of the pair's question")
    df = df.reset_index(drop=True)
    edges = PairEdges(columns=numeric, source=source)
    rows = []
    for key, g in df.groupby(["model", "question_id"] if has_model else ["question_id"], sort=False):
        model, qid = (str(key[0]), str(key[1])) if has_model else (None, str(key[0] if isinstance(key, tuple)
                                                                              else key))
        nodes: dict[tuple, int] = {}
        first_seen: dict[int, tuple[int, int]] = {}  # node -> (record, side) where it first appears
        pairs: dict[tuple[int, int], dict[str, float]] = {}
        problem = None
        for pos, r in zip(g.index, g.itertuples(index=False)):
            ends = []
            for side in (0, 1):
                triple = tuple(_text(getattr(r, cols[c][side])) for c in texts)
                ends.append(nodes.setdefault(triple, len(nodes)))
                first_seen.setdefault(ends[-1], (pos, side))
            a, b = sorted(ends)
            if a == b:
                problem = problem or f"{lines[pos]} pairs a node with itself"
            elif (a, b) in pairs:
                problem = problem or f"{lines[pos]} repeats the pair of nodes {a} and {b}"
            pairs[(a, b)] = {c: float(getattr(r, c)) for c in numeric}
            for c, v in pairs[(a, b)].items():
                if not math.isfinite(v):
                    edges.non_finite.setdefault((model, qid, c), lines[pos])
        n = len(nodes)
        if problem is None and len(pairs) != n * (n - 1) // 2:
            problem = f"{len(pairs)} pairs for {n} nodes, not the {n * (n - 1) // 2} of a complete graph"
        if problem is not None:
            edges.incomplete[(model, qid)] = problem
        edges.values[(model, qid)] = pairs
        extra = {"question": str(g["question"].iloc[0])} if "question" in g.columns else {}
        if has_model:
            extra["model"] = model
        para_ids: dict[str, int] = {}
        per_para: dict[str, int] = {}
        for triple, node in nodes.items():
            values = dict(zip(texts, triple))
            pos, side = first_seen[node]
            empty = {c: (lines[pos], cols[c][side]) for c, v in values.items() if not v.strip()}
            if empty:
                edges.empty_cells[len(rows)] = empty
            para = values.get("paraphrase", "")
            row = {"question_id": qid, **extra, "paraphrase_id": para_ids.setdefault(para, len(para_ids) + 1),
                   "sample": per_para.get(para, 0), **values, "node": node}
            per_para[para] = row["sample"] + 1
            rows.append(row)
    return pd.DataFrame(rows), edges


def _text(value) -> str:
    """Cell text; a missing cell is "" so the usual empty-text checks report it."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value)
