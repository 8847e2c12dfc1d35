"""`sage report`: one self-contained HTML page (and Markdown) for a run directory."""
from __future__ import annotations

from pathlib import Path

import click

from sage.reporting.run_report import build_report


@click.command("report")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--out", "out_html", type=click.Path(path_type=Path), default=None,
              help="HTML file (default RUN_DIR/report.html); the Markdown goes beside it.")
@click.option("--correlation", type=click.Path(path_type=Path), default=None,
              help="correlation.json of 'sage correlate' (default RUN_DIR/correlation/correlation.json if present).")
@click.option("--rank-by", default=None, help="Column ranking the most/least consistent questions (default sge_answer).")
@click.option("--top", "top_k", type=int, default=5, show_default=True, help="Questions shown at each end.")
@click.option("--n-boot", type=int, default=2000, show_default=True, help="Resamples for CIs missing from summary.json.")
@click.option("--seed", type=int, default=0, show_default=True)
def command(run_dir, out_html, correlation, rank_by, top_k, n_boot, seed):
    """Per-model summary with CIs, SGE histograms, extreme questions, metric-human correlations."""

    res = build_report(run_dir, out_html, None, correlation, rank_by, top_k, n_boot, seed)
    click.echo(f"wrote {res['html']} and {res['markdown']} (figures: {', '.join(res['figures'])})")
