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
from sage.metrics.question_metrics import (
    BASELINES, COLUMN_EDGE, LABELS, QUESTION_METRICS, QuestionView, column_edge_applies, edge_column, is_column_edge,
)
from sage.metrics.similarity import SIMILARITIES, SimilarityOptions, build_similarity
from sage.metrics.stats import bootstrap_mean_ci
from sage.provenance import provenance

log = logging.getLogger(__name__)

METRICS = ("sge",) + BASELINES  # the default; every name in QUESTION_METRICS (e.g. "se") can be chosen
METRIC_LABELS = LABELS


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
            QUESTION_METRICS.get(m)  # one-line error naming the choices
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
        for metric in self.question_metrics():
            metric.check(self)

    def question_metrics(self):
        return [QUESTION_METRICS.get(m)() for m in self.metrics]

    def needed_similarities(self) -> list[str]:
        """Similarities to build (column edges are read from the file, not computed)."""
        return list(dict.fromkeys(n for m in self.question_metrics() for n in m.similarities(self)
                                  if not is_column_edge(n)))

    def column_edges(self) -> list[str]:
        return [e for e in self.sge_edges if is_column_edge(e)] if "sge" in self.metrics else []


def sge_column(edge: str, primary: str, col: str, part: str = "sge") -> str:
    return edge_column(edge, primary, col, part)


@dataclass
class ScoreResult:
    questions: pd.DataFrame
    summary: dict
    responses: pd.DataFrame | None = None  # the rows that were scored (canonical columns)
    edges: pd.DataFrame | None = None  # one row per pair: every similarity, directional NLI/judge values

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
        if self.edges is not None:
            self.edges.to_csv(out / "edges.csv", index=False)
        return out


def headline_columns(summary: dict) -> list[tuple[str, str]]:
    """(column, label) pairs for the summary table: per text column, each metric in the chosen order."""
    cfg = summary["config"]
    return [pair for col in cfg["on"] for m in cfg["metrics"] for pair in QUESTION_METRICS.get(m)().headline(cfg, col)]


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
    if summary.get("warnings"):
        lines += [""] + [f"Warning: {w}" for w in summary["warnings"]]
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
    # The question each group answers (the LLM judge shows it); None where the table has none.
    questions_text = [str(df["question"].iloc[r[0]]) if "question" in df.columns and pd.notna(df["question"].iloc[r[0]])
                      else None for r in group_rows]

    timings: dict[str, float] = {}
    sims: dict[tuple[str, str], list] = {(n, c): [] for n in config.needed_similarities() for c in on}
    relations: dict[tuple[str, str], list] = {}
    for name in config.column_edges():  # read, not computed: the pair file's values between these nodes
        for col in on:
            sims[(name, col)] = [_column_matrix(pair_edges, name, col, df, key, rows)
                                 for key, rows in zip(keys, group_rows)]
    similarities = {}
    for name in config.needed_similarities():
        t0 = time.perf_counter()
        similarities[name] = build_similarity(name, config.similarity)  # models load once per run
        timings[f"load_{name}"] = time.perf_counter() - t0
    # Questions in chunks: model work stays batched while per-text caches stay bounded.
    chunks = [range(i, min(i + config.chunk_questions, len(keys))) for i in range(0, len(keys), config.chunk_questions)]
    forward = 0.0
    bar = tqdm(total=len(chunks) * len(similarities) * len(on), desc="scoring", disable=not progress, unit="step")
    for chunk in chunks:
        for name, sim in similarities.items():
            clock = getattr(sim, "clock", None)  # forward-pass timer of model-based similarities
            t0, f0 = time.perf_counter(), clock.seconds if clock else None
            for col in on:
                bar.set_postfix_str(f"{name} on {col}")
                groups, contexts = [texts[col][g] for g in chunk], [questions_text[g] for g in chunk]
                sims[(name, col)].extend(sim.matrices(groups, contexts))
                if sim.judges_equivalence:  # served from the similarity's own per-pair cache
                    relations.setdefault((name, col), []).extend(sim.relations(groups, contexts))
                bar.update(1)
            timings[f"compute_{name}"] = timings.get(f"compute_{name}", 0.0) + time.perf_counter() - t0
            if f0 is not None:
                forward += clock.seconds - f0
        for sim in similarities.values():
            sim.release()
    bar.close()

    t0 = time.perf_counter()
    rows = []
    metrics = config.question_metrics()
    for gi, (model, qid) in enumerate(keys):
        first = group_rows[gi][0]
        row = {"model": model, "question_id": qid, "n": len(group_rows[gi])}
        if "question" in df.columns:
            row["question"] = df["question"].iloc[first]
        frame = df.iloc[group_rows[gi]]
        for col in on:
            view = QuestionView(col, texts[col][gi], {n: sims[(n, c)][gi] for n, c in sims if c == col},
                                {n: relations[(n, col)][gi] for n in similarities if (n, col) in relations}, frame)
            for metric in metrics:
                row.update(metric.columns(config, view))
        rows.append(row)
    questions = pd.DataFrame(rows)
    from sage.metrics.edge_table import edge_table

    edges = edge_table(df, keys, group_rows, on, sims, relations)
    timings["sge_and_aggregation"] = time.perf_counter() - t0
    timings["model_forward"] = forward
    timings["total"] = time.perf_counter() - t_start

    summary = _summarize(questions, df, config, on, skipped, skipped_by_model, source, timings)
    summary["similarities"] = {n: sim.describe() for n, sim in similarities.items()}
    summary["warnings"] = [w for sim in similarities.values() for w in sim.warnings()]
    for w in summary["warnings"]:
        log.warning("%s", w)
    if pair_edges is not None:
        summary["pair_layout"] = {
            "columns": pair_edges.columns,
            "incomplete_questions": [{"model": m, "question_id": q, "why": why}
                                     for (m, q), why in pair_edges.incomplete.items()],
        }
        for (m, q), why in pair_edges.incomplete.items():
            log.warning("%s: question %s: pairs do not form a complete graph (%s); its column edges are not used",
                        source, q, why)
    return ScoreResult(questions=questions, summary=summary, responses=df, edges=edges)


def _check_column_edges(config: ScoreConfig, pair_edges, source: str) -> None:
    for edge in config.column_edges():
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
