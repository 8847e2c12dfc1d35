"""Build the HTML + Markdown report of a run directory.

Sections: per-model summary with 95% CIs (summary.json, or bootstrap over questions.csv when it is
absent), per-question SGE histograms, the most and least consistent questions with their answers
(responses.csv when present) and metric-human correlations with error bars (correlation.json from
`sage correlate` when present). The HTML page has no external resources: figures are base64 PNGs.
"""
from __future__ import annotations

import html
import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from sage.annotation.correlation import metric_columns, read_question_scores
from sage.errors import SageInputError
from sage.metrics.stats import bootstrap_mean_ci
from sage.outputs import write_text
from sage.reporting import figures
from sage.reporting.inputs import check_question_counts, read_correlation, read_summary

log = logging.getLogger(__name__)

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2rem auto;max-width:1100px;
color:#222;line-height:1.45;padding:0 1rem}
div.wide{overflow-x:auto}table{border-collapse:collapse;margin:1rem 0;font-size:.9rem}th,td{border:1px solid #ccc;padding:.3rem .5rem;
vertical-align:top;text-align:left}th{background:#f3f3f3}td.num{text-align:right;white-space:nowrap}
figure{margin:1rem 0}img{max-width:100%}ol.answers{margin:0;padding-left:1.2rem}.muted{color:#666;font-size:.85rem}
"""
# Counts decoded figures and script errors into body data attributes (read by the headless-browser test).
_CHECK_JS = """
window.__sageErrors=0;window.addEventListener('error',function(){window.__sageErrors++;
document.body.setAttribute('data-js-errors',window.__sageErrors)});
window.addEventListener('load',function(){var ok=0,imgs=document.images;for(var i=0;i<imgs.length;i++){
if(imgs[i].complete&&imgs[i].naturalWidth>0){ok++}}document.body.setAttribute('data-figures-loaded',ok);
document.body.setAttribute('data-figures-total',imgs.length);
document.body.setAttribute('data-js-errors',window.__sageErrors)});
"""


def _fmt(v: Any, digits: int = 3) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "n/a"
    return f"{f:.{digits}f}" if np.isfinite(f) else "n/a"


def _ci_cell(s: dict | None) -> str:
    if not s or not s.get("n"):
        return "n/a"
    return f"{_fmt(s['mean'])} [{_fmt(s['ci_low'])}, {_fmt(s['ci_high'])}]"


def load_run(run_dir: Path, correlation: Path | None = None) -> dict[str, Any]:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise SageInputError(f"{run_dir}: not a directory; pass the run directory written by 'sage score'")
    qpath = run_dir / "questions.csv"
    if not qpath.is_file():
        raise SageInputError(f"{run_dir}: no questions.csv; pass the run directory written by 'sage score'")
    questions = read_question_scores(qpath)
    summary = None
    if (run_dir / "summary.json").is_file():
        summary = read_summary(run_dir / "summary.json")
        check_question_counts(summary, questions, qpath, run_dir / "summary.json")
    responses = None
    if (run_dir / "responses.csv").is_file():
        from sage.data.responses import read_responses

        responses = read_responses(run_dir / "responses.csv")
    corr_path = Path(correlation) if correlation else run_dir / "correlation" / "correlation.json"
    corr = None
    if corr_path.is_file():
        corr = read_correlation(corr_path)
    elif correlation:
        raise SageInputError(f"{corr_path}: file not found")
    return {"run_dir": run_dir, "questions": questions, "summary": summary, "responses": responses,
            "correlation": corr, "correlation_path": corr_path if corr else None}


def model_summary(questions, metrics: list[str], summary: dict | None, n_boot: int, seed: int) -> dict[str, dict]:
    """{model: {metric: {mean, ci_low, ci_high, n}}}: from summary.json, else bootstrapped here."""

    out: dict[str, dict] = {}
    for model, q in questions.groupby("model", sort=False):
        known = ((summary or {}).get("models") or {}).get(model, {}).get("metrics", {})
        out[model] = {m: known.get(m) or bootstrap_mean_ci(q[m].to_numpy(float), n_boot=n_boot, seed=seed).as_dict()
                      for m in metrics}
    return out


def extremes(questions, responses, rank_by: str, k: int) -> dict[str, dict[str, list[dict]]]:
    """Per model: the k most and k least consistent questions by `rank_by`, with their answers."""
    out = {}
    for model, q in questions.groupby("model", sort=False):
        q = q[np.isfinite(q[rank_by].to_numpy(float))].sort_values([rank_by, "question_id"])
        picks = {"most": q.iloc[::-1].head(k), "least": q.head(k)}
        out[model] = {}
        for side, rows in picks.items():
            items = []
            for rec in rows.to_dict(orient="records"):
                answers, question = [], rec.get("question") or ""
                if responses is not None:
                    r = responses[(responses["model"].astype(str) == model)
                                  & (responses["question_id"].astype(str) == str(rec["question_id"]))]
                    answers = [str(a) for a in r["answer"].tolist()]
                    if not question and "question" in r.columns and len(r):
                        question = str(r["question"].iloc[0])
                items.append({"question_id": rec["question_id"], "question": question, "value": rec[rank_by],
                              "answers": answers})
            out[model][side] = items
    return out


def build_report(run_dir: Path, out_html: Path | None = None, out_md: Path | None = None,
                 correlation: Path | None = None, rank_by: str | None = None, top_k: int = 5,
                 n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:

    data = load_run(run_dir, correlation)
    q = data["questions"]
    metrics = metric_columns(q)
    sge_cols = [m for m in metrics if m.startswith("sge_")]
    rank_by = rank_by or ("sge_answer" if "sge_answer" in q.columns else (sge_cols or metrics)[0])
    if rank_by not in q.columns:
        raise SageInputError(f"--rank-by {rank_by!r} is not a column of questions.csv; choose one of {metrics}")
    if top_k < 1:
        raise SageInputError("--top must be >= 1")
    summ = model_summary(q, metrics, data["summary"], n_boot, seed)
    hist_cols = [c for c in ("sge_answer", "sge_rot") if c in q.columns] or [rank_by]
    figs = {
        "means": figures.means_with_ci(
            [{"label": f"{model} {m}", "mean": s["mean"], "low": s["ci_low"], "high": s["ci_high"]}
             for model, ms in summ.items() for m, s in ms.items() if m in sge_cols or m == rank_by],
            "Per-model mean with 95% CI"),
        "hist": figures.histograms(q, hist_cols),
    }
    corr = data["correlation"]
    if corr:
        method = corr["methods"][0] if corr.get("methods") else "spearman"
        figs["corr"] = figures.correlation_bars(corr["correlations"], method)
    ext = extremes(q, data["responses"], rank_by, top_k)
    unranked = int((~np.isfinite(q[rank_by].to_numpy(float))).sum())
    ctx = {"run_dir": str(data["run_dir"]), "metrics": metrics, "summary": summ, "questions": q, "rank_by": rank_by,
           "extremes": ext, "correlation": corr, "raw_summary": data["summary"] or {}, "seed": seed,
           "n_boot": n_boot, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "has_responses": data["responses"] is not None, "unranked": unranked}
    out_html = Path(out_html) if out_html else data["run_dir"] / "report.html"
    out_md = Path(out_md) if out_md else out_html.with_suffix(".md")
    out_html.parent.mkdir(parents=True, exist_ok=True)
    write_text(out_html, render_html(ctx, figs))
    write_text(out_md, render_markdown(ctx))
    log.info("report written to %s and %s", out_html, out_md)
    return {"html": out_html, "markdown": out_md, "figures": sorted(figs), "rank_by": rank_by}


def _summary_rows(ctx) -> tuple[list[str], list[list[str]]]:
    """One row per metric, one column per model (metrics outnumber models)."""
    models = list(ctx["summary"])
    rows = [["questions"] + [str(int((ctx["questions"]["model"] == m).sum())) for m in models]]
    rows += [[metric] + [_ci_cell(ctx["summary"][m][metric]) for m in models] for metric in ctx["metrics"]]
    return ["metric"] + models, rows


def _corr_rows(corr) -> tuple[list[str], list[list[str]]]:
    metrics = corr["metrics"]
    by = {(r["metric"], r["method"]): r for r in corr["correlations"]}
    rows = []
    for method in corr["methods"]:
        cells = []
        for m in metrics:
            r = by.get((m, method))
            cells.append("n/a" if r is None else f"{_fmt(r['r'])} [{_fmt(r['ci95_low'])}, {_fmt(r['ci95_high'])}]")
        rows.append([method] + cells)
    return ["correlation with human"] + metrics, rows


def _provenance_line(ctx) -> str:
    raw = ctx["raw_summary"]
    cfg = raw.get("config", {})
    prov = raw.get("provenance", {})
    parts = [f"run {ctx['run_dir']}", f"report created {ctx['created']}"]
    if cfg:
        parts.append(f"summary CIs: {cfg.get('n_boot')} bootstrap resamples, seed {cfg.get('seed')}")
    else:
        parts.append(f"no summary.json: CIs bootstrapped here ({ctx['n_boot']} resamples, seed {ctx['seed']})")
    if prov:
        parts.append(f"git {prov.get('git')}")
    return "; ".join(parts)


def _html_table(head, rows, num_from: int = 1) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(
        f"<td{' class=num' if i >= num_from else ''}>{html.escape(c)}</td>" for i, c in enumerate(r)) + "</tr>"
        for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _img(b64: str, fig_id: str, alt: str) -> str:
    return f'<figure><img id="{fig_id}" alt="{html.escape(alt)}" src="data:image/png;base64,{b64}"></figure>'


def render_html(ctx, figs) -> str:
    e = html.escape
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>SaGE report: {e(Path(ctx['run_dir']).name)}</title><style>{_CSS}</style>",
        f"<script>{_CHECK_JS}</script></head><body>",
        f"<h1>SaGE consistency report: {e(Path(ctx['run_dir']).name)}</h1>",
        f'<p class="muted">{e(_provenance_line(ctx))}</p>',
        "<h2>Per-model summary</h2><p>Mean over questions with a 95% bootstrap CI.</p>",
        _html_table(*_summary_rows(ctx)), _img(figs["means"], "fig-means", "per-model means with 95% CIs"),
        "<h2>Distribution of per-question SGE</h2>", _img(figs["hist"], "fig-hist", "histograms of per-question SGE"),
    ]
    for side, title in (("most", "Most consistent questions"), ("least", "Least consistent questions")):
        parts.append(f"<h2>{title} (by {e(ctx['rank_by'])})</h2>")
        if ctx["unranked"]:
            parts.append(f'<p class="muted">{ctx["unranked"]} questions with an undefined {e(ctx["rank_by"])} are not ranked.</p>')
        if not ctx["has_responses"]:
            parts.append('<p class="muted">No responses.csv in the run: answers are not shown.</p>')
        for model, sides in ctx["extremes"].items():
            parts.append(f"<h3>{e(model)}</h3><table><thead><tr><th>question</th><th>{e(ctx['rank_by'])}</th>"
                         "<th>answers</th></tr></thead><tbody>")
            for it in sides[side]:
                answers = "".join(f"<li>{e(a)}</li>" for a in it["answers"])
                parts.append(f"<tr><td><b>{e(str(it['question_id']))}</b> {e(it['question'])}</td>"
                             f"<td class=num>{_fmt(it['value'])}</td><td><ol class=answers>{answers}</ol></td></tr>")
            parts.append("</tbody></table>")
    parts.append("<h2>Metric-human correlation</h2>")
    corr = ctx["correlation"]
    if corr:
        c = corr.get("counts", {})
        parts.append(f"<p>Human consistency: definition <code>{e(str(corr.get('definition')))}</code>, aggregate "
                     f"<code>{e(str(corr.get('aggregate')))}</code>, {c.get('questions_joined', '?')} questions; "
                     f"95% CIs from {corr.get('n_boot')} bootstrap resamples (seed {corr.get('seed')}).</p>")
        parts.append('<div class="wide">' + _html_table(*_corr_rows(corr)) + "</div>")
        parts.append(_img(figs["corr"], "fig-corr", "metric-human correlations with 95% CIs"))
    else:
        parts.append('<p class="muted">No human labels for this run (run <code>sage correlate</code> to add them).</p>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


_MD_SPECIAL = str.maketrans({"\\": "\\\\", "[": "\\[", "]": "\\]", "|": "\\|", "`": "\\`"})


def _md(text: Any) -> str:
    """A text from the data, inert in report.md: HTML escaped (`&`, `<`, `>`: no raw tags, no
    autolinks), Markdown link/image brackets, code spans and pipes backslash-escaped, and every run
    of whitespace (newlines, tabs, carriage returns) one space, so it stays on its line or cell."""
    return html.escape(" ".join(str(text).split()), quote=False).translate(_MD_SPECIAL)


def _md_table(head, rows, num_from: int = 1) -> list[str]:
    """Head cells and the first `num_from` cells of each row come from the data (`_md`); the
    others are numbers formatted here (only HTML-escaped and pipes escaped, to be safe)."""
    def num(c: Any) -> str:
        return html.escape(" ".join(str(c).split()), quote=False).replace("|", "\\|")

    esc = [[_md(c) for c in head]] + [[_md(c) if i < num_from else num(c) for i, c in enumerate(r)] for r in rows]
    return ["| " + " | ".join(esc[0]) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in esc[1:]]


def render_markdown(ctx) -> str:
    """report.md: every text taken from the data (names, ids, questions, answers, provenance) goes
    through `_md`, so `<script>`, `<img onerror>` or a `[link](javascript:...)` in an answer is shown
    as text by any Markdown renderer, including those that pass raw HTML through."""
    rank_by = _md(ctx["rank_by"])
    lines = [f"# SaGE consistency report: {_md(Path(ctx['run_dir']).name)}", "", _md(_provenance_line(ctx)), "",
             "Figures are embedded in report.html.", "", "## Per-model summary", ""]
    lines += _md_table(*_summary_rows(ctx))
    for side, title in (("most", "Most consistent questions"), ("least", "Least consistent questions")):
        lines += ["", f"## {title} (by {rank_by})", ""]
        if ctx["unranked"]:
            lines += [f"{ctx['unranked']} questions with an undefined {rank_by} are not ranked.", ""]
        for model, sides in ctx["extremes"].items():
            lines += [f"### {_md(model)}", ""]
            for it in sides[side]:
                lines.append(f"- **{_md(it['question_id'])}** ({_fmt(it['value'])}) {_md(it['question'])}")
                lines += [f"  {i + 1}. {_md(a)}" for i, a in enumerate(it["answers"])]
    lines += ["", "## Metric-human correlation", ""]
    if ctx["correlation"]:
        lines += _md_table(*_corr_rows(ctx["correlation"]))
    else:
        lines.append("No human labels for this run.")
    return "\n".join(lines) + "\n"
