"""`sage score`: score a responses table with SGE and the baselines."""
from __future__ import annotations

from pathlib import Path

import click

from sage.cli.options import csv_list


def _print_summary(summary: dict) -> None:
    """Metrics as rows and models as columns, so the table fits a terminal."""
    from rich.console import Console
    from rich.table import Table

    from sage.scoring import headline_columns

    table = Table(title="SaGE consistency: mean [95% CI] over questions")
    table.add_column("Metric")
    models = list(summary["models"])
    for model in models:
        n = summary["models"][model]["n_questions_scored"]
        table.add_column(f"{model} (n={n})", justify="right")
    for col, label in headline_columns(summary):
        cells = []
        for model in models:
            s = summary["models"][model]["metrics"].get(col)
            cells.append("n/a" if not s or s["n"] == 0 else f"{s['mean']:.3f} [{s['ci_low']:.3f}, {s['ci_high']:.3f}]")
        table.add_row(label, *cells)
    Console().print(table)


@click.command("score")
@click.option("--responses", "responses", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Responses table (.csv, .jsonl, .parquet) with question_id/question and answer columns.")
@click.option("--embedder", default=None, help="Sentence-transformers id or path (default: bundled all-MiniLM-L6-v2).")
@click.option("--metrics", default="sge,bleu,rouge_l,bertscore,cosine", show_default=True,
              help="Comma-separated metrics: sge, bleu, rouge_l, bertscore, cosine.")
@click.option("--on", "on", default=None, help="Text columns to score: answer,rot (default: answer, plus rot if present).")
@click.option("--sge-edges", default="cosine", show_default=True,
              help="Edge similarities for SGE (d = 1 - sim): cosine, bertscore, rouge_l, bleu. The first gives sge_<col>.")
@click.option("--bertscore-model", default=None, help="BERTScore encoder id or path (default: the embedder).")
@click.option("--bertscore-layers", type=int, default=None, help="BERTScore layer (default: the model's last).")
@click.option("--model-name", default=None, help="Model label when the table has no 'model' column (default: file stem).")
@click.option("--skip-invalid", is_flag=True, help="Skip rows with empty/NaN texts and report single-row questions as undefined, counting both.")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output directory (default: runs/<responses file stem>).")
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@click.option("--n-boot", type=int, default=2000, show_default=True, help="Bootstrap resamples for the CIs.")
@click.option("--device", default=None, help="torch device for encoders (default: cpu).")
@click.option("--no-progress", is_flag=True, help="Hide progress bars.")
def command(responses, embedder, metrics, on, sge_edges, bertscore_model, bertscore_layers, model_name,
            skip_invalid, out, seed, n_boot, device, no_progress):
    """Score a responses table: per-question SGE and baselines, per-model means with 95% CIs."""
    from sage.data.responses import read_responses
    from sage.metrics.similarity import SimilarityOptions
    from sage.scoring import ScoreConfig, score_responses

    df = read_responses(responses)
    if model_name:
        df["model"] = model_name
    elif (df["model"] == "model").all():
        df["model"] = responses.stem
    config = ScoreConfig(
        metrics=csv_list(metrics), on=csv_list(on), sge_edges=csv_list(sge_edges),
        similarity=SimilarityOptions(embedder=embedder, bertscore_model=bertscore_model,
                                     bertscore_layers=bertscore_layers, device=device),
        skip_invalid=skip_invalid, n_boot=n_boot, seed=seed,
    )
    result = score_responses(df, config, source=str(responses), progress=not no_progress)
    out = out or Path("runs") / responses.stem
    result.write(out)
    _print_summary(result.summary)
    click.echo(f"wrote {out / 'questions.csv'}, {out / 'summary.json'}, {out / 'summary.md'}")
