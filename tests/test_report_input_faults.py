"""`sage report` on run files of the wrong shape or cut short (issue 54, item 8): summary.json and
correlation.json of the wrong shape, questions.csv truncated mid-row, with a row short of columns,
with extra fields, with a text in a metric column, or with fewer questions than summary.json counts.
Each is one `error:` line naming the file and the field or row, exit status 2, and no report written.
`python -m sage report` in a real subprocess."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from fixtures_cli import assert_clean_error, run_sage
from test_reporting_html import make_run

SUMMARY = {"config": {"n_boot": 99, "seed": 4}, "provenance": {"git": "abc"},
           "models": {"model-a": {"n_questions": 10, "metrics": {
               "sge_answer": {"mean": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 10}}}}}


def _report(run):
    return run_sage("report", run, timeout=300)


def _no_report(run):
    assert not (run / "report.html").exists() and not (run / "report.md").exists()


def _with_summary(tmp_path, summary):
    run = make_run(tmp_path, with_correlation=False)
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def _with(summary_path: str, value):
    """SUMMARY with the dotted field set to value."""
    out = json.loads(json.dumps(SUMMARY))
    *parents, last = summary_path.split(".")
    node = out
    for key in parents:
        node = node[key]
    node[last] = value
    return out


@pytest.mark.parametrize("summary, needles", [
    ([1, 2], ["the top level is a list", "not an object"]),
    ({"metrics": 5}, ["field 'models' is missing"]),
    ({"models": 5}, ["field 'models' is a number (5), not an object"]),
    ({"models": {"model-a": [1]}}, ["field 'models.model-a' is a list, not an object"]),
    (_with("models.model-a.metrics", "x"), ["field 'models.model-a.metrics' is a string (\"x\"), not an object"]),
    (_with("models.model-a.metrics.sge_answer.mean", "high"),
     ["field 'models.model-a.metrics.sge_answer.mean' is a string (\"high\"), not a number (or null)"]),
    (_with("models.model-a.metrics.sge_answer.n", 2.5),
     ["field 'models.model-a.metrics.sge_answer.n' is a number (2.5), not a whole number"]),
    (_with("models.model-a.metrics.sge_answer", {"mean": 0.5}),
     ["field 'models.model-a.metrics.sge_answer.ci_low' is missing"]),
    (_with("config", [4]), ["field 'config' is a list, not an object"]),
    (_with("provenance", "abc"), ["field 'provenance' is a string (\"abc\"), not an object"]),
])
def test_a_summary_json_of_the_wrong_shape_is_one_line_naming_the_file_and_field(tmp_path, summary, needles):
    run = _with_summary(tmp_path, summary)
    proc = _report(run)
    assert_clean_error(proc, str(run / "summary.json"), *needles, "re-run 'sage score', or remove the file")
    _no_report(run)


def test_undefined_statistics_may_be_null_and_the_report_is_written(tmp_path):
    run = _with_summary(tmp_path, _with("models.model-a.metrics.sge_answer",
                                        {"mean": None, "ci_low": None, "ci_high": None, "n": 0}))
    proc = _report(run)
    assert proc.returncode == 0, proc.stderr
    assert "| sge_answer | n/a |" in (run / "report.md").read_text()


def test_fewer_questions_than_summary_json_counts_is_an_error(tmp_path):
    run = _with_summary(tmp_path, SUMMARY)
    q = pd.read_csv(run / "questions.csv", dtype=str)
    q.drop(index=[9]).to_csv(run / "questions.csv", index=False)  # the last row of model-a gone, cut at a row end
    proc = _report(run)
    assert_clean_error(proc, str(run / "questions.csv"), "9 rows of model 'model-a'",
                       "counts 10 questions", "cut short or from another run")
    _no_report(run)


@pytest.mark.parametrize("corr, needle", [
    ([], "the top level is a list, not an object"),
    ({"correlations": 5}, "field 'correlations' is a number (5), not a list"),
    ({"correlations": [{"metric": "sge_answer", "method": "spearman", "r": "0.6"}], "methods": ["spearman"],
      "metrics": ["sge_answer"]}, "field 'correlations[0].r' is a string (\"0.6\"), not a number"),
    ({"correlations": [], "methods": "spearman"}, "field 'methods' is a string (\"spearman\"), not a list of names"),
])
def test_a_correlation_json_of_the_wrong_shape_is_one_line_naming_the_field(tmp_path, corr, needle):
    run = make_run(tmp_path)
    path = run / "correlation" / "correlation.json"
    path.write_text(json.dumps(corr))
    assert_clean_error(_report(run), str(path), needle, "re-run 'sage correlate'")
    _no_report(run)


def _questions_text(run) -> str:
    q = pd.read_csv(run / "questions.csv", dtype=str)
    q.insert(2, "question", [f"Is deed {i}, said \"twice\", fine?" for i in range(len(q))])
    return q.to_csv(index=False)


@pytest.mark.parametrize("cut, needles", [
    # the last line cut in the middle of its quoted question text
    (lambda t: t[:t.rindex('"twice"') + 3], ["row 21: the file ends inside a quoted field", "cut short"]),
    # the last row short of columns (cut after its question)
    (lambda t: t[:t.rindex(",")].rsplit(",", 3)[0] + "\n", ["row 21 has 4 of the header's 8 columns",
                                                            "cut short"]),
    # the last row cut inside its last number, without the final line break
    (lambda t: t.rstrip("\n")[:-3], ["row 21: the file ends without a line break after this row", "cut short"]),
    # a row with one field too many
    (lambda t: t.replace("\nmodel-a,q3,", "\nmodel-a,q3,extra,", 1), ["row 5 has 9 fields but the header has 8"]),
    # a text in a metric column
    (lambda t: t.replace(",3,", ",three,", 1), ["row 2 column 'n': 'three' is not a number"]),
])
def test_a_truncated_or_malformed_questions_csv_is_one_line_naming_the_file_and_row(tmp_path, cut, needles):
    run = make_run(tmp_path, with_correlation=False)
    text = _questions_text(run)
    (run / "questions.csv").write_text(cut(text))
    proc = _report(run)
    assert_clean_error(proc, str(run / "questions.csv"), *needles, "re-run 'sage score'")
    _no_report(run)


def test_a_whole_questions_csv_with_quoted_texts_still_reports(tmp_path):
    run = make_run(tmp_path, with_correlation=False)
    (run / "questions.csv").write_text(_questions_text(run))
    proc = _report(run)
    assert proc.returncode == 0, proc.stderr
    assert 'Is deed 9, said "twice", fine?' in (run / "report.md").read_text()
