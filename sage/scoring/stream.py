"""`score_responses`: a responses table scored in chunks of questions, so memory stays bounded on
large tables; every question's metrics, the responses and edges streamed to `out_dir`."""
from __future__ import annotations

import logging
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from sage.data.responses import as_responses, load_responses
from sage.errors import SageInputError
from sage.metrics.question_metrics import (
    COLUMN_EDGE,
    QuestionView,
    column_edge_applies,
)
from sage.metrics.similarity import build_similarity
from sage.progress import progress_bar
from sage.scoring.scoring_config import ScoreConfig
from sage.scoring.malloc_tuning import fix_mmap_threshold, release_free_heap
from sage.scoring.summary import ScoreResult, summarize

log = logging.getLogger(__name__)


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
        log.warning("%s: skipping %d rows that cannot be scored (rows %s)", source, len(skipped), skipped[:10])

    chunk_metrics = _ChunkMetrics(config, on, pair_edges)
    sinks = ({name: TableSink(Path(out_dir) / f"{name}.{table_format}") for name in ("responses", "edges")}
             if out_dir is not None else None)
    kept: dict[str, list] = {"responses": [], "edges": []}
    question_rows: list[dict] = []
    n_chunks = -(-sum(v > 0 for v in index.valid_rows.values()) // config.chunk_questions)
    bar = progress_bar(total=n_chunks, desc="scoring", enabled=progress, unit="chunk")
    fix_mmap_threshold()  # memory flat over chunks (sage/scoring/malloc_tuning.py)
    try:
        for chunk in question_chunks(table, index, source, config.chunk_questions, labels):
            chunk = canonical_order(chunk.reset_index(drop=True))
            rows, edges = chunk_metrics.score(chunk)
            question_rows += rows
            for name, part in (("responses", chunk), ("edges", edges)):
                if sinks is not None:
                    sinks[name].append(part)
                else:
                    kept[name].append(part)
            release_free_heap()
            bar.update(1)
        bar.close()
        for sink in (sinks or {}).values():
            sink.close()
    except BaseException:  # no half-written table is left beside the outputs
        for sink in (sinks or {}).values():
            sink.discard()
        raise

    # Questions none of whose rows could be scored (every answer empty) are listed as undefined too.
    questions = pd.DataFrame(question_rows + index.undefined_without_rows())
    if len(questions):  # the order questions first appear in the table, whatever order they finished in
        order = [index.order[(m, q)] for m, q in zip(questions["model"], questions["question_id"])]
        questions = questions.iloc[np.argsort(order, kind="stable")].reset_index(drop=True)
    timings = {**chunk_metrics.timings, "total": time.perf_counter() - t_start}
    summary = summarize(questions, index, config, on, skipped, source, timings)
    summary["similarities"] = {n: sim.describe() for n, sim in chunk_metrics.similarities.items()}
    summary["warnings"] = index.warnings(source) + [w for sim in chunk_metrics.similarities.values()
                                                    for w in sim.warnings()]
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


class _ChunkMetrics:
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
        from sage.scoring.edge_table import edge_table

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


