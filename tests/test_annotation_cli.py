"""`sage annotate export/import/agreement` and `sage correlate` end to end through `python -m sage`."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from fixtures_cli import assert_clean_error, run_sage

REPO = Path(__file__).resolve().parents[1]


def sage(*args, cwd=None):
    return run_sage(*args, cwd=cwd, timeout=300)


_assert_user_error = assert_clean_error


def responses(n_questions=8, n_answers=4) -> pd.DataFrame:
    return pd.DataFrame([
        {"question_id": f"q{q}", "question": f"Is action {q} acceptable?", "paraphrase_id": p,
         "paraphrase": f"Is action {q} acceptable (wording {p})?", "model": "m", "sample": 0,
         "answer": f"Answer {p} to question {q}: it {'is' if p % 2 else 'is not'} acceptable.",
         "rot": f"Rule {p} for {q}."}
        for q in range(n_questions) for p in range(n_answers)
    ])


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Export, fill in as three annotators (question q has q % 7 entailment pairs), import."""
    tmp = tmp_path_factory.mktemp("study")
    resp = responses()
    resp.to_csv(tmp / "responses.csv", index=False)
    proc = sage("annotate", "export", tmp / "responses.csv", "--out", tmp / "exp", "--annotators", "a1,a2,a3",
                "--seed", "5")
    assert proc.returncode == 0, proc.stderr
    assert "48 pairs (48 possible) from 8 questions" in proc.stdout
    sheet = pd.read_csv(tmp / "exp" / "pairs.csv", dtype=str, keep_default_na=False)
    rank = sheet.groupby("question_id").cumcount()
    k = sheet["question_id"].str[1:].astype(int) % 7
    sheet["a1"] = ["E" if r < kk else "C" for r, kk in zip(rank, k)]
    sheet["a2"] = sheet["a1"]
    sheet["a3"] = sheet["a1"].where(rank != 5, "")  # a3 skipped one pair per question
    sheet.to_csv(tmp / "filled.csv", index=False)
    proc = sage("annotate", "import", tmp / "filled.csv", "--pairs", tmp / "exp" / "pairs.csv", "--out", tmp / "labels.csv")
    assert proc.returncode == 0, proc.stderr
    run = tmp / "run"
    run.mkdir()
    resp.to_csv(run / "responses.csv", index=False)
    qs = pd.DataFrame({"model": "m", "question_id": [f"q{q}" for q in range(8)], "n": 4})
    qs["sge_answer"] = [(q % 7) ** 0.5 for q in range(8)]
    qs["bleu_answer"] = [-(q % 7) for q in range(8)]
    qs.to_csv(run / "questions.csv", index=False)
    return tmp, proc


def test_export_files(study):
    tmp, _ = study
    exp = tmp / "exp"
    for name in ("pairs.csv", "pairs.jsonl", "labelstudio_tasks.json", "labelstudio_config_nli.xml",
                 "labelstudio_config_binary.xml", "export_meta.json"):
        assert (exp / name).is_file(), name
    meta = json.loads((exp / "export_meta.json").read_text())
    assert meta["seed"] == 5 and meta["counts"]["pairs"] == 48
    assert len(json.loads((exp / "labelstudio_tasks.json").read_text())) == 48


def test_import_counts(study):
    tmp, proc = study
    assert "136 nli labels from 3 annotators on 48 pairs; skipped cells 8" in proc.stdout
    report = json.loads((tmp / "labels.report.json").read_text())
    assert report["counts"]["skipped_by_annotator"] == {"a3": 8}
    assert len(pd.read_csv(tmp / "labels.csv")) == 136


def test_agreement_cli(study):
    tmp, _ = study
    proc = sage("annotate", "agreement", tmp / "labels.csv", "--n-boot", "50", "--out", tmp / "agr.json")
    assert proc.returncode == 0, proc.stderr
    res = json.loads((tmp / "agr.json").read_text())
    assert res["fleiss_kappa"] == pytest.approx(1.0) and res["krippendorff_alpha"] == pytest.approx(1.0)
    assert res["fleiss_items_left_out"] == 8 and (tmp / "agr.md").is_file()


def test_correlate_cli(study):
    tmp, _ = study
    proc = sage("correlate", tmp / "run", "--labels", tmp / "labels.csv", "--pairs", tmp / "exp" / "pairs.csv",
                "--n-boot", "100", "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    res = json.loads((tmp / "run" / "correlation" / "correlation.json").read_text())
    by = {(r["metric"], r["method"]): r["r"] for r in res["correlations"]}
    assert by["sge_answer", "spearman"] == pytest.approx(1.0) and by["bleu_answer", "kendall"] == pytest.approx(-1.0)
    assert res["seed"] == 3 and res["comparisons"][0]["metric_b"] == "bleu_answer"
    assert (tmp / "run" / "correlation" / "correlation.md").read_text().startswith("# Metric-human correlation")
    # Without --pairs the pairs are rebuilt from RUN_DIR/responses.csv and the ids still match.
    proc = sage("correlate", tmp / "run", "--labels", tmp / "filled.csv", "--n-boot", "0", "--out", tmp / "c2")
    assert proc.returncode == 0, proc.stderr
    res2 = json.loads((tmp / "c2" / "correlation.json").read_text())
    assert res2["correlations"][0]["r"] == pytest.approx(1.0)


def test_cli_errors_exit_2(study, tmp_path):
    tmp, _ = study
    bad = pd.read_csv(tmp / "filled.csv", dtype=str, keep_default_na=False)
    bad.loc[3, "pair_id"] = "answer-0000"
    bad.to_csv(tmp_path / "bad.csv", index=False)
    _assert_user_error(sage("annotate", "import", tmp_path / "bad.csv", "--pairs", tmp / "exp" / "pairs.csv",
                            "--out", tmp_path / "x.csv"), "row 5", "unknown pair id 'answer-0000'")
    (tmp_path / "broken.json").write_text('[{"data": ')
    _assert_user_error(sage("annotate", "agreement", tmp_path / "broken.json"), "malformed JSON")
    _assert_user_error(sage("correlate", tmp_path, "--labels", tmp / "labels.csv"), "no questions.csv")
    _assert_user_error(sage("annotate", "export", tmp_path / "missing.csv", "--out", tmp_path / "o"), "missing.csv")
    _assert_user_error(sage("correlate", tmp / "run", "--labels", tmp / "labels.csv", "--compare", "sge_answer"),
                       "--compare 'sge_answer'")


def test_export_with_toolkit_predictions(tmp_path):
    responses(n_questions=2).to_csv(tmp_path / "r.csv", index=False)
    proc = sage("annotate", "export", tmp_path / "r.csv", "--out", tmp_path / "e", "--format", "labelstudio",
                "--predict", "rouge_l", "--high", "0.6", "--low", "0.3", "--max-pairs", "3")
    assert proc.returncode == 0, proc.stderr
    tasks = json.loads((tmp_path / "e" / "labelstudio_tasks.json").read_text())
    assert len(tasks) == 6 and all(len(t["predictions"]) == 1 for t in tasks)
    meta = json.loads((tmp_path / "e" / "export_meta.json").read_text())
    assert meta["predict"] == "rouge_l" and meta["n_predictions"] == 6 and meta["files"].keys() >= {"labelstudio"}
    assert not (tmp_path / "e" / "pairs.csv").exists()
    _assert_user_error(sage("annotate", "export", tmp_path / "r.csv", "--out", tmp_path / "e2", "--predict", "nope"),
                       "unknown similarity 'nope'")
