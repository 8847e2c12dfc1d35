"""Score a responses table: per-question SGE and baselines, per-model means with bootstrap CIs.

    result = sage.score_responses(df)            # or a path
    result.questions                             # one row per (model, question_id)
    result.write("runs/demo")                    # questions.csv, summary.json, summary.md
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from sage.data.responses import as_responses, load_responses, validate, write_responses
from sage.errors import SageInputError
from sage.metrics.sge import UNDEFINED, distances_from_similarity, sge_from_distances
from sage.metrics.similarity import SIMILARITIES, SimilarityOptions, build_similarity, upper_mean
from sage.metrics.stats import bootstrap_mean_ci
from sage.provenance import provenance

log = logging.getLogger(__name__)

BASELINES = ("bleu", "rouge_l", "bertscore", "cosine")
METRICS = ("sge",) + BASELINES
METRIC_LABELS = {"sge": "SGE", "bleu": "BLEU", "rouge_l": "ROUGE-L", "bertscore": "BERTScore", "cosine": "Cosine"}


@dataclass(frozen=True)
class ScoreConfig:
    metrics: tuple[str, ...] = METRICS
    on: tuple[str, ...] | None = None  # None: answer, plus rot when the table has RoTs
    sge_edges: tuple[str, ...] = ("cosine",)  # the first names the plain sge_<col> columns
    similarity: SimilarityOptions = field(default_factory=SimilarityOptions)
    skip_invalid: bool = False
    chunk_questions: int = 2000  # questions scored together (bounds per-text caches)
    n_boot: int = 2000
    seed: int = 0

    def __post_init__(self):
        for m in self.metrics:
            if m not in METRICS:
                raise SageInputError(f"unknown metric {m!r}; choose from {', '.join(METRICS)}")
        for e in self.sge_edges:
            if e not in SIMILARITIES and not is_column_edge(e):
                raise SageInputError(f"unknown SGE edge similarity {e!r}; choose from "
                                     f"{', '.join(SIMILARITIES.names())} or column:NAME (a pair-layout file's column)")
        if not self.metrics:
            raise SageInputError("no metrics selected; pass at least one of " + ", ".join(METRICS))
        if self.chunk_questions < 1:
            raise SageInputError("chunk_questions must be >= 1")
        if not self.sge_edges:
            raise SageInputError("no SGE edge similarity selected; pass e.g. --sge-edges cosine")
        for c in self.on or ():
            if c not in ("answer", "rot"):
                raise SageInputError(f"unknown text column {c!r} for --on; choose answer and/or rot")

    def needed_similarities(self) -> list[str]:
        names = [e for e in self.sge_edges if not is_column_edge(e)] if "sge" in self.metrics else []
        names += [m for m in self.metrics if m in BASELINES and m not in names]
        return names


def sge_column(edge: str, primary: str, col: str, part: str = "sge") -> str:
    return f"{part}_{col}" if edge == primary else f"{part}_{edge.removeprefix(COLUMN_EDGE)}_{col}"


COLUMN_EDGE = "column:"  # --sge-edges column:NAME: similarities read from a pair-layout file's column
_COLUMN_TARGETS = {"_model_output": "answer", "_answer": "answer", "_rot": "rot"}


def is_column_edge(edge: str) -> bool:
    return edge.startswith(COLUMN_EDGE)


def column_edge_applies(edge: str, col: str) -> bool:
    """A pair column names the texts it compares by its suffix (the authors' `cosine_model_output`
    compares answers, `cosine_rot` RoTs); a column without such a suffix applies to every text."""
    name = edge.removeprefix(COLUMN_EDGE)
    target = next((t for suffix, t in _COLUMN_TARGETS.items() if name.endswith(suffix)), None)
    return target is None or target == col


@dataclass
class ScoreResult:
    questions: pd.DataFrame
    summary: dict
    responses: pd.DataFrame | None = None  # the rows that were scored (canonical columns)

    def metric_columns(self) -> list[str]:
        skip = {"model", "question_id", "question", "n"}
        return [c for c in self.questions.columns if c not in skip]

    def write(self, out_dir: str | Path) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.questions.to_csv(out / "questions.csv", index=False)
        (out / "summary.json").write_text(json.dumps(self.summary, indent=2, default=str) + "\n")
        (out / "summary.md").write_text(summary_markdown(self.summary))
        if self.responses is not None:
            write_responses(self.responses, out / "responses.csv")
        return out


def headline_columns(summary: dict) -> list[tuple[str, str]]:
    """(column, label) pairs for the summary table: SGE per text column first, then baselines."""
    cfg = summary["config"]
    cols = []
    for col in cfg["on"]:
        for edge in cfg["sge_edges"] if "sge" in cfg["metrics"] else []:
            name = sge_column(edge, cfg["sge_edges"][0], col)
            suffix = "" if edge == "cosine" else f"/{edge}"  # cosine: the method's own edges
            cols.append((name, f"SGE{suffix} ({col})"))
        for m in cfg["metrics"]:
            if m in BASELINES:
                cols.append((f"{m}_{col}", f"{METRIC_LABELS[m]} ({col})"))
    return cols


def summary_markdown(summary: dict) -> str:
    cols = headline_columns(summary)
    lines = [
        "# SaGE consistency summary",
        "",
        "Mean over questions with a 95% bootstrap CI "
        f"({summary['config']['n_boot']} resamples, seed {summary['config']['seed']}). "
        f"SGE edges: {', '.join(summary['config']['sge_edges'])}.",
        "",
        "| Model | Questions | " + " | ".join(label for _, label in cols) + " |",
        "|---|---:|" + "---:|" * len(cols),
    ]
    for model, m in summary["models"].items():
        cells = []
        for c, _ in cols:
            s = m["metrics"].get(c)
            cells.append("n/a" if not s or s["n"] == 0 else f"{s['mean']:.3f} [{s['ci_low']:.3f}, {s['ci_high']:.3f}]")
        lines.append(f"| {model} | {m['n_questions_scored']} | " + " | ".join(cells) + " |")
    lines += ["", "Counts: " + "; ".join(
        f"{model}: {m['n_rows']} rows, {m['n_questions']} questions, {m['n_undefined']} undefined (single row), "
        f"{m['n_skipped_rows']} rows skipped" for model, m in summary["models"].items()), ""]
    if summary.get("undefined_questions"):
        lines += ["Undefined questions (fewer than two answers; excluded from the means): " + ", ".join(
            f"{u['question_id']} ({u['model']})" for u in summary["undefined_questions"]), ""]
    lines.append(f"Provenance: sage {summary['provenance']['versions'].get('sage-consistency', '?')}, "
                 f"git {summary['provenance']['git']}, created {summary['provenance']['created']}.")
    return "\n".join(lines) + "\n"


def score_responses(
    responses: pd.DataFrame | str | Path,
    config: ScoreConfig | None = None,
    *,
    source: str | None = None,
    progress: bool = True,
    pair_edges=None,
    **overrides,
) -> ScoreResult:
    """Score a responses table (DataFrame or file path, either layout). Keyword overrides set
    ScoreConfig fields. `pair_edges`: the `PairEdges` of a pair-layout table already read."""
    t_start = time.perf_counter()
    if isinstance(responses, (str, Path)):
        source = source or str(responses)
        df, pair_edges = load_responses(responses)
    else:
        source = source or "responses"
        df, edges = as_responses(responses, source=source)
        pair_edges = pair_edges if pair_edges is not None else edges
    config = _config_with(config, overrides)
    _check_column_edges(config, pair_edges, source)
    on = config.on or (("answer", "rot") if "rot" in df.columns else ("answer",))

    report = validate(df, on)
    if not report.ok and not config.skip_invalid:
        raise SageInputError(report.first_problem(source))
    skipped = sorted(report.bad_rows)
    skipped_by_model = df["model"].iloc[[r - 1 for r in skipped]].value_counts().to_dict()
    if skipped:
        log.warning("%s: skipping %d rows with empty texts (rows %s)", source, len(skipped), skipped[:10])
        df = df.drop(index=df.index[[r - 1 for r in skipped]])
    df = df.reset_index(drop=True)

    keys, group_rows = [], []
    for key, rows in df.groupby(["model", "question_id"], sort=False).indices.items():
        keys.append(key)
        group_rows.append(np.sort(rows))
    texts = {col: [df[col].iloc[r].astype(str).tolist() for r in group_rows] for col in on}

    timings: dict[str, float] = {}
    sims: dict[tuple[str, str], list] = {(n, c): [] for n in config.needed_similarities() for c in on}
    similarities = {}
    for name in config.needed_similarities():
        t0 = time.perf_counter()
        similarities[name] = build_similarity(name, config.similarity)  # models load once per run
        timings[f"load_{name}"] = time.perf_counter() - t0
    # Questions in chunks: model work stays batched while per-text caches stay bounded.
    chunks = [range(i, min(i + config.chunk_questions, len(keys))) for i in range(0, len(keys), config.chunk_questions)]
    forward = 0.0
    bar = tqdm(total=len(chunks) * len(sims), desc="scoring", disable=not progress, unit="step")
    for name in config.sge_edges if "sge" in config.metrics else ():
        if is_column_edge(name):  # read, not computed: the pair file's values between these nodes
            for col in on:
                sims[(name, col)] = [_column_matrix(pair_edges, name, col, df, key, rows)
                                     for key, rows in zip(keys, group_rows)]
    for chunk in chunks:
        for name, sim in similarities.items():
            clock = getattr(sim, "clock", None)  # forward-pass timer of model-based similarities
            t0, f0 = time.perf_counter(), clock.seconds if clock else None
            for col in on:
                bar.set_postfix_str(f"{name} on {col}")
                sims[(name, col)].extend(sim.matrices([texts[col][g] for g in chunk]))
                bar.update(1)
            timings[f"compute_{name}"] = timings.get(f"compute_{name}", 0.0) + time.perf_counter() - t0
            if f0 is not None:
                forward += clock.seconds - f0
        for sim in similarities.values():
            sim.release()
    bar.close()

    t0 = time.perf_counter()
    rows = []
    primary = config.sge_edges[0]
    for gi, (model, qid) in enumerate(keys):
        first = group_rows[gi][0]
        row = {"model": model, "question_id": qid, "n": len(group_rows[gi])}
        if "question" in df.columns:
            row["question"] = df["question"].iloc[first]
        for col in on:
            if "sge" in config.metrics:
                for edge in config.sge_edges:
                    mat = sims[(edge, col)][gi]
                    if mat is None:  # a column edge that does not cover these texts
                        res = UNDEFINED
                    else:
                        res = (sge_from_distances(distances_from_similarity(mat, texts[col][gi]))
                               if mat.shape[0] > 1 else UNDEFINED)
                    row[sge_column(edge, primary, col)] = res.sge
                    row[sge_column(edge, primary, col, "D")] = res.D
                    row[sge_column(edge, primary, col, "H")] = res.H
                    row[sge_column(edge, primary, col, "meansim")] = res.mean_similarity
            for m in config.metrics:
                if m in BASELINES:
                    row[f"{m}_{col}"] = upper_mean(sims[(m, col)][gi])
        rows.append(row)
    questions = pd.DataFrame(rows)
    timings["sge_and_aggregation"] = time.perf_counter() - t0
    timings["model_forward"] = forward
    timings["total"] = time.perf_counter() - t_start

    summary = _summarize(questions, df, config, on, skipped, skipped_by_model, source, timings)
    if pair_edges is not None:
        summary["pair_layout"] = {
            "columns": pair_edges.columns,
            "incomplete_questions": [{"model": m, "question_id": q, "why": why}
                                     for (m, q), why in pair_edges.incomplete.items()],
        }
        for (m, q), why in pair_edges.incomplete.items():
            log.warning("%s: question %s: pairs do not form a complete graph (%s); its column edges are not used",
                        source, q, why)
    return ScoreResult(questions=questions, summary=summary, responses=df)


def _check_column_edges(config: ScoreConfig, pair_edges, source: str) -> None:
    for edge in config.sge_edges if "sge" in config.metrics else ():
        if not is_column_edge(edge):
            continue
        name = edge.removeprefix(COLUMN_EDGE)
        if pair_edges is None:
            raise SageInputError(f"--sge-edges {edge}: {source} is not in the pair layout "
                                 "(question_id, model_output_1, model_output_2, ...); column edges need one")
        if name not in pair_edges.columns:
            raise SageInputError(f"--sge-edges {edge}: {source} has no numeric pair column {name!r}; "
                                 f"it has: {', '.join(pair_edges.columns) or 'none'}")


def _column_matrix(pair_edges, edge: str, col: str, df: pd.DataFrame, key, rows):
    """The pair file's similarity between the nodes of one question (None: not defined here)."""
    if not column_edge_applies(edge, col):
        return None
    model, qid = key
    return pair_edges.similarity(edge.removeprefix(COLUMN_EDGE), model, qid, df["node"].iloc[rows].tolist())


def _config_with(config: ScoreConfig | None, overrides: dict) -> ScoreConfig:
    config = config or ScoreConfig()
    if not overrides:
        return config
    fields = asdict(config)
    fields["similarity"] = config.similarity
    unknown = set(overrides) - set(fields)
    if unknown:
        raise TypeError(f"unknown score_responses options: {sorted(unknown)}")
    fields.update({k: (tuple(v) if isinstance(v, list) else v) for k, v in overrides.items()})
    return ScoreConfig(**fields)


def _summarize(questions, df, config, on, skipped, skipped_by_model, source, timings) -> dict:
    metric_cols = [c for c in questions.columns if c not in ("model", "question_id", "question", "n")]
    models = {}
    for model, q in questions.groupby("model", sort=False):
        defined = q["n"] >= 2
        models[model] = {
            "n_rows": int((df["model"] == model).sum()),
            "n_questions": int(len(q)),
            "n_undefined": int((~defined).sum()),
            "n_questions_scored": int(defined.sum()),
            "n_skipped_rows": int(skipped_by_model.get(model, 0)),
            "metrics": {
                c: bootstrap_mean_ci(q.loc[defined, c].to_numpy(), n_boot=config.n_boot, seed=config.seed).as_dict()
                for c in metric_cols
            },
        }
    cfg = asdict(config)
    cfg["on"] = list(on)
    return {
        "source": source,
        "config": cfg,
        "models": models,
        "skipped_rows": skipped,
        "undefined_questions": [
            {"model": m, "question_id": q} for m, q in questions.loc[questions["n"] < 2, ["model", "question_id"]].itertuples(index=False)
        ],
        "timings_seconds": timings,
        "provenance": provenance(config.seed),
    }
