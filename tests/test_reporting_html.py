"""`sage report`: self-contained HTML + Markdown, figures present, extremes right, headless Chromium render."""
from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sage.errors import SageInputError
from sage.reporting.run_report import build_report

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


def make_run(tmp: Path, with_correlation: bool = True, with_summary: bool = False) -> Path:
    run = tmp / "run"
    run.mkdir()
    rng = np.random.default_rng(0)
    resp, qs = [], []
    for model in ("model-a", "model-b"):
        for q in range(10):
            for p in range(3):
                resp.append({"question_id": f"q{q}", "question": f"Is deed {q} <fine>?", "paraphrase_id": p,
                             "model": model, "sample": 0, "answer": f"{model} answer {p} to q{q} & <b>bold</b>"})
            qs.append({"model": model, "question_id": f"q{q}", "n": 3, "sge_answer": (q + 1) / 11 - 0.05 * (model == "model-b"),
                       "sge_rot": rng.random(), "bleu_answer": rng.random(), "cosine_answer": rng.random()})
    pd.DataFrame(resp).to_csv(run / "responses.csv", index=False)
    pd.DataFrame(qs).to_csv(run / "questions.csv", index=False)
    if with_summary:
        (run / "summary.json").write_text(json.dumps({
            "config": {"n_boot": 99, "seed": 4}, "provenance": {"git": "abc"},
            "models": {"model-a": {"metrics": {"sge_answer": {"mean": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 10}}}}}))
    if with_correlation:
        (run / "correlation").mkdir()
        recs = [{"metric": m, "method": "spearman", "r": r, "ci95_low": r - 0.2, "ci95_high": r + 0.1, "p_value": 0.01,
                 "n_questions": 20} for m, r in (("sge_answer", 0.6), ("bleu_answer", 0.2))]
        (run / "correlation" / "correlation.json").write_text(json.dumps({
            "definition": "entail", "aggregate": "mean", "methods": ["spearman"], "metrics": ["sge_answer", "bleu_answer"],
            "correlations": recs, "n_boot": 100, "seed": 0, "counts": {"questions_joined": 20}}))
    return run


def _images(page: str) -> list[bytes]:
    return [base64.b64decode(b) for b in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def test_report_contents(tmp_path):
    run = make_run(tmp_path)
    res = build_report(run, top_k=2, n_boot=200)
    page = res["html"].read_text()
    imgs = _images(page)
    assert len(imgs) == 3 and all(i.startswith(b"\x89PNG\r\n\x1a\n") for i in imgs)
    assert "http://" not in page and "https://" not in page  # self-contained
    assert "&lt;b&gt;bold&lt;/b&gt;" in page and "<b>bold</b>" not in page  # answers are escaped
    md = res["markdown"].read_text()
    # Most consistent of model-a by sge_answer: q9 then q8; least: q0 then q1 (independent ranking).
    q = pd.read_csv(run / "questions.csv")
    a = q[q.model == "model-a"].sort_values("sge_answer")
    most = md.split("## Most consistent")[1].split("## Least")[0].split("### model-b")[0]
    least = md.split("## Least consistent")[1].split("### model-b")[0]
    assert re.findall(r"\*\*(q\d)\*\*", most) == a.question_id.tolist()[::-1][:2]
    assert re.findall(r"\*\*(q\d)\*\*", least) == a.question_id.tolist()[:2]
    assert "model-a answer 2 to q9" in most
    # Summary CI row equals a bootstrap written out here: 200 resamples drawn with numpy's
    # default_rng(0) (seed 0, as documented), the mean of each, the 2.5 / 97.5 percentiles.
    import numpy as np

    values = a.sge_answer.to_numpy(dtype=float)
    rng = np.random.default_rng(0)
    draws = rng.integers(0, len(values), size=(200, len(values)))
    means = sorted(sum(values[i] for i in row) / len(row) for row in draws)
    low, high = (float(np.percentile(means, q)) for q in (2.5, 97.5))
    assert f"| sge_answer | {sum(values) / len(values):.3f} [{low:.3f}, {high:.3f}]" in md
    assert "| spearman | 0.600 [0.400, 0.700] |" in md


def test_report_without_labels_uses_summary_json(tmp_path):
    run = make_run(tmp_path, with_correlation=False, with_summary=True)
    res = build_report(run, out_html=tmp_path / "out" / "r.html")
    page = res["html"].read_text()
    assert len(_images(page)) == 2 and "No human labels" in page and res["figures"] == ["hist", "means"]
    assert "0.500 [0.400, 0.600]" in page and "seed 4" in page


def test_report_errors(tmp_path):
    with pytest.raises(SageInputError, match="no questions.csv"):
        build_report(tmp_path)
    run = make_run(tmp_path)
    with pytest.raises(SageInputError, match="--rank-by 'nope'"):
        build_report(run, rank_by="nope")
    (run / "correlation" / "correlation.json").write_text("{broken")
    with pytest.raises(SageInputError, match="correlation.json: unreadable JSON"):
        build_report(run)


def test_report_cli(tmp_path):
    run = make_run(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "sage", "report", str(run), "--top", "3"], capture_output=True,
                          text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (run / "report.html").is_file() and (run / "report.md").is_file()
    proc = subprocess.run([sys.executable, "-m", "sage", "report", str(tmp_path / "none")], capture_output=True,
                          text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "not a directory" in proc.stderr


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
def test_report_renders_in_headless_chromium(tmp_path):
    run = make_run(tmp_path)
    res = build_report(run, n_boot=100)
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=5000"]
    dom = subprocess.run(cmd + ["--dump-dom", res["html"].resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", dom.stdout).group(1)
    attrs = dict(re.findall(r'data-([a-z-]+)="(\d+)"', body))
    assert attrs == {"figures-loaded": "3", "figures-total": "3", "js-errors": "0"}, body
    assert dom.stdout.count('id="fig-') == 3
    shot = tmp_path / "page.png"
    proc = subprocess.run(cmd + ["--window-size=1200,1600", f"--screenshot={shot}", res["html"].resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and shot.read_bytes().startswith(b"\x89PNG")


def test_undefined_values_are_counted_not_hidden(tmp_path):
    run = make_run(tmp_path, with_correlation=False)
    q = pd.read_csv(run / "questions.csv")
    q.loc[[0, 1], "sge_answer"] = np.nan
    q.to_csv(run / "questions.csv", index=False)
    md = build_report(run, n_boot=50)["markdown"].read_text()
    assert "2 questions with an undefined sge_answer are not ranked." in md
    assert "**q0**" not in md.split("## Least consistent")[1].split("### model-b")[0]


PAYLOADS = ("<script>alert(1)</script>", "<svg onload=alert(1)>", "<img src=x onerror=alert(1)>")


def test_report_md_carries_no_active_html_from_the_data(tmp_path):
    """Issue 54, item 14: answers, questions and model names with HTML are shown as text in report.md,
    also by a Markdown renderer that passes raw HTML through; table cells and list lines stay whole."""
    from markdown_it import MarkdownIt

    run = make_run(tmp_path, with_correlation=False)
    bad_model = "evil<img src=x onerror=alert(2)>|m"
    for name in ("responses.csv", "questions.csv"):
        t = pd.read_csv(run / name, dtype=str)
        t["model"] = t["model"].replace({"model-b": bad_model})
        if name == "responses.csv":
            t["answer"] = [f"{PAYLOADS[i % 3]} answer {i}\n| x [a](javascript:alert(3))" for i in range(len(t))]
            t["question"] = "Is it fine? <svg onload=alert(4)>"
        t.to_csv(run / name, index=False)
    proc = subprocess.run([sys.executable, "-m", "sage", "report", str(run), "--n-boot", "50"], capture_output=True,
                          text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    md = (run / "report.md").read_text()
    for raw in (*PAYLOADS, "<svg onload=alert(4)>", "<img src=x onerror=alert(2)>", "[a](javascript:"):
        assert raw not in md
    assert "&lt;script&gt;alert(1)&lt;/script&gt; answer" in md and "&lt;svg onload=alert(1)&gt;" in md
    assert "&lt;img src=x onerror=alert(1)&gt;" in md and "\\[a\\](javascript:alert(3))" in md
    assert "| metric | model-a | evil&lt;img src=x onerror=alert(2)&gt;\\|m |" in md  # one cell, pipe escaped
    rendered = MarkdownIt("default", {"html": True}).render(md)  # raw HTML allowed, GFM tables
    for tag in ("<script", "<svg", "<img", "<a "):
        assert tag not in rendered
    assert "<th>evil&lt;img src=x onerror=alert(2)&gt;|m</th>" in rendered  # the model name is one cell
    assert rendered.count("<li>") == md.count("\n  ") + md.count("\n- ")  # each answer one list item
    html_page = (run / "report.html").read_text()
    assert "<script>alert(1)" not in html_page and "<svg onload" not in html_page
