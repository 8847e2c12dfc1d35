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

from sage.data.responses import as_responses, load_responses, write_responses
from sage.errors import SageInputError
from sage.heap import fix_mmap_threshold, release_free_heap
from sage.metrics.graph_measures import GraphOptions
from sage.metrics.question_metrics import (
    BASELINES,
    COLUMN_EDGE,
    LABELS,
    METRIC_ALIASES,
    QUESTION_METRICS,
    QuestionView,
    column_edge_applies,
    edge_column,
    is_column_edge,
)
from sage.metrics.semantic_entropy import CLUSTERING_RULES, EQUIVALENCE_RULES
from sage.metrics.similarity import SIMILARITIES, SimilarityOptions, build_similarity
from sage.metrics.stats import bootstrap_mean_ci
from sage.progress import progress_bar
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
    graph: GraphOptions = field(default_factory=GraphOptions)  # num_sets, eigv, degree, eccentricity, kle
    se_equivalence: str = "loose"  # semantic entropy: loose or strict (sage.metrics.semantic_entropy)
    se_clustering: str = "reference"  # reference (get_semantic_ids), first-member, chain
    skip_invalid: bool = False
    chunk_questions: int = 100  # questions scored together: memory is bounded by the chunk, not the table
    n_boot: int = 2000
    seed: int = 0

    def __post_init__(self):
        # Aliases name a metric sage already computes (lexsim = rouge_l): one entry, computed once.
        object.__setattr__(self, "metrics", tuple(dict.fromkeys(METRIC_ALIASES.get(m, m) for m in self.metrics)))
        for m in self.metrics:
            QUESTION_METRICS.get(m)  # one-line error naming the choices
        if self.se_equivalence not in EQUIVALENCE_RULES:
            raise SageInputError(f"unknown --se-equivalence {self.se_equivalence!r}; choose {' or '.join(EQUIVALENCE_RULES)}")
        if self.se_clustering not in CLUSTERING_RULES:
            raise SageInputError(f"unknown --se-clustering {self.se_clustering!r}; choose one of "
                                 f"{', '.join(CLUSTERING_RULES)}")
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
        """Column edges some chosen metric reads (SGE and the graph measures use every edge)."""
        return list(dict.fromkeys(n for m in self.question_metrics() for n in m.similarities(self)
                                  if is_column_edge(n)))


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

    def write(self, out_dir: str | Path, table_format: str = "csv") -> Path:
        """questions, summary.json, summary.md, and responses and edges when held in memory (a run
        scored with `out_dir` streamed those there already)."""
        from sage.data.files import write_table

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_table(self.questions, out / f"questions.{table_format}")
        (out / "summary.json").write_text(json.dumps(self.summary, indent=2, default=str) + "\n")
        (out / "summary.md").write_text(summary_markdown(self.summary))
        if self.responses is not None:
            write_responses(self.responses, out / f"responses.{table_format}")
        if self.edges is not None:
            write_table(self.edges, out / f"edges.{table_format}")
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
        f"{model}: {m['n_rows']} rows, {m['n_questions']} questions, {m['n_undefined']} undefined (fewer than two answers), "
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
    out_dir: str | Path | None = None,
    table_format: str = "csv",
    model_name: str | None = None,
    default_model: str = "model",
    **overrides,
) -> ScoreResult:
    """Score a responses table (DataFrame or file path, either layout). Keyword overrides set
    ScoreConfig fields. `pair_edges`: the `PairEdges` of a pair-layout table already read.

    The table is scored `chunk_questions` questions at a time (`sage.data.response_stream`), so
    memory does not grow with the number of questions. With `out_dir`, each chunk's scored rows
    and edges are appended to `responses.<table_format>` and `edges.<table_format>` there as it
    finishes (and `ScoreResult.responses`/`.edges` stay None); otherwise they are returned.
    `model_name` labels every row; `default_model` labels a table without a model column."""
    from sage.data.pair_layout import is_pair_layout
    from sage.data.response_stream import (
        Labels,
        index_table,
        peek_columns,
        question_chunks,
    )
    from sage.data.responses import canonical_order
    from sage.data.table_sink import TableSink

    t_start = time.perf_counter()
    source = source or (str(responses) if isinstance(responses, (str, Path)) else "responses")
    config = _config_with(config, overrides)
    table = responses
    if isinstance(responses, pd.DataFrame) and pair_edges is not None:
        table = responses  # nodes already rebuilt from a pair-layout file by the caller
    elif is_pair_layout(pd.DataFrame(columns=peek_columns(responses))):
        # The authors' pair files are small; their nodes are rebuilt from the whole file.
        table, pair_edges = (as_responses(responses, source=source, default_model=default_model)
                             if isinstance(responses, pd.DataFrame) else load_responses(responses, default_model))
    _check_column_edges(config, pair_edges, source)
    columns = peek_columns(table)
    on = config.on or (("answer", "rot") if "rot" in columns else ("answer",))

    labels = Labels(default=default_model, override=model_name)
    index = index_table(table, on, source, labels, locate=pair_edges.locate if pair_edges is not None else None)
    if not index.report.ok and not config.skip_invalid:
        raise SageInputError(index.report.first_problem(source))
    skipped = sorted(index.report.bad_rows)
    if skipped:
        log.warning("%s: skipping %d rows with empty texts (rows %s)", source, len(skipped), skipped[:10])

    scorer = _ChunkScorer(config, on, pair_edges)
    sinks = ({name: TableSink(Path(out_dir) / f"{name}.{table_format}") for name in ("responses", "edges")}
             if out_dir is not None else None)
    kept: dict[str, list] = {"responses": [], "edges": []}
    question_rows: list[dict] = []
    n_chunks = -(-sum(v > 0 for v in index.valid_rows.values()) // config.chunk_questions)
    bar = progress_bar(total=n_chunks, desc="scoring", enabled=progress, unit="chunk")
    fix_mmap_threshold()  # memory flat over chunks (sage/heap.py)
    for chunk in question_chunks(table, index, source, config.chunk_questions, labels):
        chunk = canonical_order(chunk.reset_index(drop=True))
        rows, edges = scorer.score(chunk)
        question_rows += rows
        for name, part in (("responses", chunk), ("edges", edges)):
            if sinks is not None:
                sinks[name].append(part)
            else:
                kept[name].append(part)
        release_free_heap()
        bar.update(1)
    bar.close()
    if sinks is not None:
        for sink in sinks.values():
            sink.close()

    # Questions none of whose rows could be scored (every answer empty) are listed as undefined too.
    questions = pd.DataFrame(question_rows + index.undefined_without_rows())
    if len(questions):  # the order questions first appear in the table, whatever order they finished in
        order = [index.order[(m, q)] for m, q in zip(questions["model"], questions["question_id"])]
        questions = questions.iloc[np.argsort(order, kind="stable")].reset_index(drop=True)
    timings = {**scorer.timings, "total": time.perf_counter() - t_start}
    summary = _summarize(questions, index, config, on, skipped, source, timings)
    summary["similarities"] = {n: sim.describe() for n, sim in scorer.similarities.items()}
    summary["warnings"] = [w for sim in scorer.similarities.values() for w in sim.warnings()]
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
    joined = {name: (pd.concat(parts, ignore_index=True) if parts else None) for name, parts in kept.items()}
    return ScoreResult(questions=questions, summary=summary, responses=joined["responses"], edges=joined["edges"])


class _ChunkScorer:
    """Scores chunks of whole questions with similarities built once per run."""

    def __init__(self, config: ScoreConfig, on: tuple[str, ...], pair_edges):
        self.config, self.on, self.pair_edges = config, on, pair_edges
        self.metrics = config.question_metrics()
        self.timings: dict[str, float] = {"model_forward": 0.0, "sge_and_aggregation": 0.0}
        self.similarities = {}
        for name in config.needed_similarities():
            t0 = time.perf_counter()
            self.similarities[name] = build_similarity(name, config.similarity)  # models load once per run
            self.timings[f"load_{name}"] = time.perf_counter() - t0

    def score(self, df: pd.DataFrame) -> tuple[list[dict], pd.DataFrame]:
        """Per-question metric rows and the edge table of one chunk."""
        from sage.metrics.edge_table import edge_table

        keys, group_rows = [], []
        for key, rows in df.groupby(["model", "question_id"], sort=False).indices.items():
            keys.append(key)
            group_rows.append(np.sort(rows))
        texts = {col: [df[col].iloc[r].astype(str).tolist() for r in group_rows] for col in self.on}
        # The question each group answers (the LLM judge shows it); None where the table has none.
        contexts = [str(df["question"].iloc[r[0]]) if "question" in df.columns and pd.notna(df["question"].iloc[r[0]])
                    else None for r in group_rows]
        sims: dict[tuple[str, str], list] = {}
        relations: dict[tuple[str, str], list] = {}
        for name in self.config.column_edges():  # read, not computed: the pair file's values
            for col in self.on:
                sims[(name, col)] = [_column_matrix(self.pair_edges, name, col, df, key, rows)
                                     for key, rows in zip(keys, group_rows)]
        for col in self.on:  # one text column at a time: per-text caches hold one column's texts
            for name, sim in self.similarities.items():
                clock = getattr(sim, "clock", None)  # forward-pass timer of model-based similarities
                t0, f0 = time.perf_counter(), clock.seconds if clock else None
                groups = [texts[col][g] for g in range(len(keys))]
                sims[(name, col)] = sim.matrices(groups, contexts)
                if sim.judges_equivalence:  # served from the similarity's own per-pair cache
                    relations[(name, col)] = sim.relations(groups, contexts)
                self.timings[f"compute_{name}"] = self.timings.get(f"compute_{name}", 0.0) + time.perf_counter() - t0
                if f0 is not None:
                    self.timings["model_forward"] += clock.seconds - f0
            for sim in self.similarities.values():
                sim.release()

        t0 = time.perf_counter()
        out = []
        for gi, (model, qid) in enumerate(keys):
            row = {"model": model, "question_id": qid, "n": len(group_rows[gi])}
            if "question" in df.columns:
                row["question"] = df["question"].iloc[group_rows[gi][0]]
            frame = df.iloc[group_rows[gi]]
            for col in self.on:
                view = QuestionView(col, texts[col][gi], {n: sims[(n, c)][gi] for n, c in sims if c == col},
                                    {n: relations[(n, col)][gi] for n in self.similarities if (n, col) in relations},
                                    frame)
                for metric in self.metrics:
                    row.update(metric.columns(self.config, view))
            out.append(row)
        edges = edge_table(df, keys, group_rows, self.on, sims, relations, self.config.se_equivalence)
        self.timings["sge_and_aggregation"] += time.perf_counter() - t0
        return out, edges


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
    fields.update(similarity=config.similarity, graph=config.graph)  # nested options stay objects
    unknown = set(overrides) - set(fields)
    if unknown:
        raise TypeError(f"unknown score_responses options: {sorted(unknown)}")
    fields.update({k: (tuple(v) if isinstance(v, list) else v) for k, v in overrides.items()})
    return ScoreConfig(**fields)


def _summarize(questions, index, config, on, skipped, source, timings) -> dict:
    metric_cols = [c for c in questions.columns if c not in ("model", "question_id", "question", "n")]
    skipped_by_model = index.skipped_per_model
    models = {}
    for model, q in questions.groupby("model", sort=False):
        defined = q["n"] >= 2
        models[model] = {
            "n_rows": int(index.rows_per_model.get(model, 0)),
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
