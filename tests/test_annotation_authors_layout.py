"""The SaGE authors' annotator layout on the real quality100 pairs, end to end through `python -m sage`.

The authors' human-evaluation sheet has `question_id, question, model_output_1, model_output_2,
ann1, ann2, ann3` (Y/N per annotator, NA where one skipped). We write that layout from the 1,000
answer pairs of `q100_gpt_3.5_edges.csv` with seeded synthetic labels (an annotator says Y with
probability ROUGE-L of the pair, so humans and ROUGE-L agree on the whole), change the text of 4
pairs slightly, and check import, Fleiss' kappa (against a numpy formula) and `sage correlate
--ignore-unknown` (skipped rows, per-question human consistency against pandas, Spearman against
scipy) on a run that `sage score` wrote from `q100_gpt_3.5_rot.csv`.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from fixtures_cli import assert_clean_error, run_sage

ANNOTATORS = ("ann1", "ann2", "ann3")
N_CHANGED = 4


def _ok(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _authors_sheet(quality100) -> tuple[pd.DataFrame, list[int]]:
    """The layout with synthetic labels, and the positions of the 4 rows whose text was changed."""
    edges = pd.read_csv(quality100 / "q100_gpt_3.5_edges.csv")
    questions = pd.read_csv(quality100 / "q100.csv").drop_duplicates("question_id").set_index("question_id")["question"]
    sheet = pd.DataFrame({"question_id": edges.question_id, "question": edges.question_id.map(questions),
                          "model_output_1": edges.model_output_1, "model_output_2": edges.model_output_2})
    swap = np.arange(len(sheet)) % 7 == 3  # either order must match
    sheet.loc[swap, ["model_output_1", "model_output_2"]] = sheet.loc[swap, ["model_output_2", "model_output_1"]].values
    rng = np.random.default_rng(2024)
    p_same = edges.rouge_model_output.to_numpy()
    for name in ANNOTATORS:
        same = rng.random(len(sheet)) < p_same
        labels = np.where(same, "Y", "N").astype(object)
        if name == "ann3":  # one annotator writes lower case
            labels = np.char.lower(labels.astype(str)).astype(object)
        labels[rng.random(len(sheet)) < 0.03] = "NA"  # skipped, as in the authors' file
        sheet[name] = labels
    changed_questions = rng.choice(sheet.question_id.unique(), size=N_CHANGED, replace=False)
    changed = sorted(int(rng.choice(np.flatnonzero(sheet.question_id.to_numpy() == q))) for q in changed_questions)
    for k, i in enumerate(changed):
        col = ("model_output_1", "model_output_2")[k % 2]
        sheet.loc[i, col] = sheet.loc[i, col].rstrip(".") + "!"  # one character: a slightly different text
    return sheet, changed


@pytest.fixture(scope="module")
def study(quality100, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("authors")
    sheet, changed = _authors_sheet(quality100)
    sheet.to_csv(tmp / "q100_human_eval.csv", index=False)
    run = tmp / "run"
    _ok(run_sage("score", "--responses", quality100 / "q100_gpt_3.5_rot.csv", "--out", run,
                 "--metrics", "rouge_l,bleu", "--on", "answer", "--n-boot", "50", "--no-progress"))
    assert (run / "responses.csv").is_file()
    return tmp, sheet, changed


def _values(sheet: pd.DataFrame) -> pd.DataFrame:
    """1 = Y, 0 = N, NaN = skipped, per annotator column (independent of the toolkit's label parsing)."""
    return sheet[list(ANNOTATORS)].apply(lambda c: c.str.upper().map({"Y": 1.0, "N": 0.0}))


def _fleiss_numpy(values: pd.DataFrame) -> float:
    """Fleiss' kappa over the items every annotator labelled (Fleiss 1971)."""
    full = values.dropna().to_numpy()
    n = full.shape[1]
    table = np.stack([(full == 1).sum(axis=1), (full == 0).sum(axis=1)], axis=1)
    p_item = ((table ** 2).sum(axis=1) - n) / (n * (n - 1))
    p_cat = table.sum(axis=0) / table.sum()
    p_e = (p_cat ** 2).sum()
    return float((p_item.mean() - p_e) / (1 - p_e))


def test_import_reads_the_layout(study):
    tmp, sheet, changed = study
    proc = _ok(run_sage("annotate", "import", tmp / "q100_human_eval.csv", "--out", tmp / "alone.csv"))
    n_labels = int(_values(sheet).notna().sum().sum())
    assert f"{n_labels} binary labels from 3 annotators on 1000 pairs" in proc.stdout
    report = json.loads((tmp / "alone.report.json").read_text())
    assert report["counts"]["annotator_columns"] == list(ANNOTATORS) and report["counts"]["local_pair_ids"] == 1000
    # Matched against the run's responses: 996 pairs get the run's pair ids, the 4 changed rows are counted.
    proc = _ok(run_sage("annotate", "import", tmp / "q100_human_eval.csv", "--responses", tmp / "run" / "responses.csv",
                        "--ignore-unknown", "--out", tmp / "matched.csv"))
    report = json.loads((tmp / "matched.report.json").read_text())
    assert report["counts"]["matched_by_text"] == 1000 - N_CHANGED
    assert report["counts"]["unmatched"]["rows"] == N_CHANGED
    assert "skipped 4 label rows" in proc.stdout
    labels = pd.read_csv(tmp / "matched.csv", dtype=str)
    assert labels.pair_id.str.startswith("answer-").all() and labels.pair_id.nunique() == 1000 - N_CHANGED


def test_agreement_fleiss_kappa_equals_numpy(study):
    tmp, sheet, changed = study
    _ok(run_sage("annotate", "agreement", tmp / "q100_human_eval.csv", "--n-boot", "20", "--out", tmp / "agr.json"))
    res = json.loads((tmp / "agr.json").read_text())
    values = _values(sheet)
    assert res["n_items"] == 1000 and res["fleiss_items"] == len(values.dropna())
    assert res["fleiss_kappa"] == pytest.approx(_fleiss_numpy(values), abs=1e-12)
    _ok(run_sage("annotate", "agreement", tmp / "q100_human_eval.csv", "--responses", tmp / "run" / "responses.csv",
                 "--ignore-unknown", "--n-boot", "20", "--out", tmp / "agr996.json"))
    res = json.loads((tmp / "agr996.json").read_text())
    kept = values.drop(index=changed)
    assert res["n_items"] == 1000 - N_CHANGED
    assert res["fleiss_kappa"] == pytest.approx(_fleiss_numpy(kept), abs=1e-12)


def test_correlate_ignore_unknown_skips_and_reports(study):
    from scipy.stats import spearmanr

    tmp, sheet, changed = study
    run = tmp / "run"
    proc = _ok(run_sage("correlate", run, "--labels", tmp / "q100_human_eval.csv", "--ignore-unknown",
                        "--n-boot", "100", "--out", tmp / "corr"))
    res = json.loads((tmp / "corr" / "correlation.json").read_text())
    skipped_q = sorted(str(q) for q in sheet.question_id.iloc[changed])
    assert res["skipped_label_rows"]["rows"] == N_CHANGED
    assert sorted(res["skipped_label_rows"]["question_ids"]) == skipped_q
    assert "Skipped (--ignore-unknown): 4 label rows" in proc.stdout and all(q in proc.stdout for q in skipped_q)
    # Independent: per pair the mean over annotators who labelled it, per question the mean over pairs.
    values = _values(sheet).drop(index=changed)
    per_pair = values.mean(axis=1, skipna=True).dropna()
    human_ref = per_pair.groupby(sheet.question_id.astype(str).loc[per_pair.index]).agg(["mean", "size"])
    got = pd.DataFrame(res["human"]).set_index("question_id")
    assert len(got) == 100 and set(got.index) == set(human_ref.index)
    np.testing.assert_allclose(got.loc[human_ref.index, "human"], human_ref["mean"], rtol=0, atol=1e-12)
    assert (got.loc[human_ref.index, "n_pairs"] == human_ref["size"]).all()
    assert set(human_ref.index[human_ref["size"] < 10]) >= set(skipped_q)
    q = pd.read_csv(run / "questions.csv", dtype={"question_id": str}).set_index("question_id")
    # Equal shares reached by different float sums must tie (the toolkit rounds to 12 decimals for that).
    ref = spearmanr(human_ref["mean"].round(12), q.loc[human_ref.index, "rouge_l_answer"]).statistic
    by = {(r["metric"], r["method"]): r for r in res["correlations"]}
    assert by["rouge_l_answer", "spearman"]["r"] == pytest.approx(ref, abs=1e-12)
    assert ref > 0.3  # labels were drawn from ROUGE-L, so the two agree across questions


def test_correlate_without_flag_is_one_error_line(study):
    tmp, sheet, changed = study
    first = changed[0]
    proc = run_sage("correlate", tmp / "run", "--labels", tmp / "q100_human_eval.csv", "--n-boot", "0",
                    "--out", tmp / "corr_fail")
    assert_clean_error(proc, "q100_human_eval.csv", f"row {first + 2}:", "model_output_1 not found",
                       f"question {str(sheet.question_id.iloc[first])!r}", "--ignore-unknown")


def test_edges_file_with_labels_matches_answers_and_rots(quality100, tmp_path):
    """The authors' edges file itself (paraphrases, answers, RoTs and pair metrics side by side) with labels."""
    from sage.annotation.importer import read_labels
    from sage.data.responses import read_responses

    edges = pd.read_csv(quality100 / "q100_gpt_3.5_edges.csv")
    responses = read_responses(quality100 / "q100_gpt_3.5_rot.csv")
    rng = np.random.default_rng(7)
    sheet = edges.assign(**{name: rng.choice(["Yes", "no", "TRUE", "0", ""], size=len(edges)) for name in ANNOTATORS})
    sheet.to_csv(tmp_path / "edges_labelled.csv", index=False)
    blanks = int((sheet[list(ANNOTATORS)] == "").sum().sum())
    for kind in ("answer", "rot"):
        got = read_labels(tmp_path / "edges_labelled.csv", responses=responses, kind=kind)
        assert got.counts["annotator_columns"] == list(ANNOTATORS) and "columns_left_out" not in got.counts
        assert got.counts["matched_by_text"] == 1000 and got.counts["unmatched"]["rows"] == 0
        assert got.labels.pair_id.str.startswith(f"{kind}-").all()
        assert len(got.labels) == 3 * 1000 - blanks and got.scheme == "binary"
