"""Score a responses table: per-question SGE, semantic entropy, graph measures and baselines, and
per-model means with bootstrap CIs.

    result = sage.score_responses(df)            # or a path
    result.questions                             # one row per (model, question_id)
    result.write("runs/demo")                    # questions.csv, summary.json, summary.md

`config` (what is computed), `stream` (chunked scoring of large tables in bounded memory),
`summary` (the result, its summary and Markdown), `edge_table` (edges.csv), `malloc_tuning`
(flat resident memory over chunks under glibc).
"""
from sage.scoring.scoring_config import METRIC_LABELS, METRICS, ScoreConfig, sge_column
from sage.scoring.stream import score_responses
from sage.scoring.summary import ScoreResult, headline_columns, summary_markdown

__all__ = ["METRICS", "METRIC_LABELS", "ScoreConfig", "ScoreResult", "headline_columns", "score_responses",
           "sge_column", "summary_markdown"]
