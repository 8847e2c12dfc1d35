"""The SaGE authors' pair layout: nodes rebuilt from pairs, precomputed similarity columns as SGE
edges (golden: their GPT-3.5 quality100 file), incomplete graphs reported."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from sage.data.responses import load_responses
from sage.errors import SageInputError
from sage.scoring import score_responses
from tests.fixtures_cli import assert_clean_error, run_sage


def _independent_sge(sim: np.ndarray) -> float:
    """SGE = 1 - D * H written out from the definition, over the off-diagonal distances."""
    n = len(sim)
    d = [[0.0 if i == j else 1.0 - sim[i][j] for j in range(n)] for i in range(n)]
    D = sum(d[i][j] for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    if D == 0:  # identical nodes: SGE = 1 whatever H is
        return 1.0
    f = [sum(row) for row in d]
    p = [x / sum(f) for x in f]
    H = -sum(x * math.log(x) for x in p if x > 0)
    return 1.0 - D * H


def authors_matrices(path, column: str) -> dict[str, tuple[list[str], np.ndarray]]:
    """Per question of an authors' pair file: its answers (nodes in order of appearance) and the
    column's similarity matrix, rebuilt here from the pairs."""
    pairs = pd.read_csv(path, keep_default_na=False)
    out = {}
    for qid, g in pairs.groupby("question_id", sort=False):
        nodes: dict = {}
        for r in g.itertuples():
            for side in ("1", "2"):
                nodes.setdefault((getattr(r, f"paraphrased_{side}"), getattr(r, f"model_output_{side}"),
                                  getattr(r, f"rot_{side}")), len(nodes))
        sim = np.eye(len(nodes))
        for r in g.itertuples():
            a = nodes[(r.paraphrased_1, r.model_output_1, r.rot_1)]
            b = nodes[(r.paraphrased_2, r.model_output_2, r.rot_2)]
            sim[a, b] = sim[b, a] = getattr(r, column)
        out[str(qid)] = ([k[1] for k in nodes], sim)
    return out


def _authors_mean(path, column: str) -> float:
    return float(np.mean([_independent_sge(sim) for _, sim in authors_matrices(path, column).values()]))


def test_golden_sge_over_the_authors_cosine_column(quality100):
    path = quality100 / "q100_gpt_3.5_edges.csv"
    res = score_responses(path, metrics=("sge",), on=("answer",), sge_edges=("column:cosine_model_output",),
                          n_boot=200, progress=False)
    ours = res.summary["models"]["model"]["metrics"]["sge_answer"]
    expected = _authors_mean(path, "cosine_model_output")
    assert ours["n"] == 100 and ours["mean"] == pytest.approx(expected, abs=1e-9)
    # the SGE paper's Table 1 reports 0.641 for GPT-3.5 answers; the released pairs give 0.638
    assert expected == pytest.approx(0.638, abs=1e-3)
    assert res.summary["pair_layout"]["incomplete_questions"] == []


def test_nodes_are_the_authors_per_answer_rows(quality100):
    nodes, edges = load_responses(quality100 / "q100_gpt_3.5_edges.csv")
    answers = pd.read_csv(quality100 / "q100_gpt_3.5_rot.csv", keep_default_na=False)
    assert len(nodes) == len(answers) == 500
    assert (nodes.groupby("question_id").size() == 5).all()
    ours = set(map(tuple, nodes[["question_id", "paraphrase", "answer", "rot"]].astype(str).to_numpy()))
    theirs = set(map(tuple, answers[["question_id", "paraphrased", "model_output", "rot"]].astype(str).to_numpy()))
    assert ours == theirs
    assert "cosine_model_output" in edges.columns and "bleu_rot" in edges.columns


def test_incomplete_graph_is_reported_not_scored(quality100, tmp_path):
    pairs = pd.read_csv(quality100 / "q100_gpt_3.5_edges.csv")
    first_q = pairs["question_id"].iloc[0]
    cut = pairs.drop(index=pairs.index[pairs["question_id"] == first_q][3])  # one pair of question 1 gone
    path = tmp_path / "cut.csv"
    cut.to_csv(path, index=False)
    res = score_responses(path, metrics=("sge", "rouge_l"), on=("answer",),
                          sge_edges=("column:cosine_model_output",), n_boot=50, progress=False)
    [problem] = res.summary["pair_layout"]["incomplete_questions"]
    assert problem["question_id"] == str(first_q) and "9 pairs for 5 nodes" in problem["why"]
    q = res.questions.set_index("question_id")
    assert math.isnan(q.loc[str(first_q), "sge_answer"])  # its precomputed edges are not used
    assert q["sge_answer"].notna().sum() == 99 and q["rouge_l_answer"].notna().all()


def test_column_edge_errors_are_one_line(quality100, tmp_path):
    with pytest.raises(SageInputError, match="no numeric pair column 'nope'"):
        score_responses(quality100 / "q100_gpt_3.5_edges.csv", sge_edges=("column:nope",), progress=False)
    with pytest.raises(SageInputError, match="not in the pair layout"):
        score_responses(quality100 / "q100_gpt_3.5_rot.csv", sge_edges=("column:cosine_model_output",),
                        progress=False)


@pytest.mark.slow
def test_cli_prints_the_table_for_the_authors_pair_file(quality100, tmp_path):
    proc = run_sage("score", "--responses", quality100 / "q100_gpt_3.5_edges.csv", "--sge-edges",
                    "column:cosine_model_output", "--metrics", "sge", "--on", "answer", "--out", tmp_path / "o",
                    "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "SGE (answer)" in proc.stdout and "0.638" in proc.stdout
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["models"]["q100_gpt_3.5_edges"]["metrics"]["sge_answer"]["n"] == 100
    bad = run_sage("score", "--responses", quality100 / "q100_gpt_3.5_edges.csv", "--sge-edges", "column:nope",
                   "--out", tmp_path / "o2")
    assert_clean_error(bad, "column:nope", "cosine_model_output")


def test_vicuna_pair_files_score_with_their_columns(shared_data):
    for name in ("vicuna-7b-v1.5_0.csv", "vicuna-7b-v1.5_1.csv", "vicuna-7b-v1.5_3.csv"):
        path = shared_data / "sage-responses" / name
        res = score_responses(path, metrics=("sge",), sge_edges=("column:cosine_model_output",
                                                                 "column:cosine_rot"), n_boot=50, progress=False)
        m = res.summary["models"]["model"]["metrics"]
        assert m["sge_answer"]["n"] == 250 and m["sge_answer"]["mean"] == pytest.approx(
            _authors_mean(path, "cosine_model_output"), abs=1e-9)
        assert m["sge_cosine_rot_rot"]["n"] == 250 and m["sge_cosine_rot_answer"]["n"] == 0


def test_an_empty_answer_names_the_files_line_and_column(quality100, tmp_path):
    """Issue 29, item 7: the error names the pair file's own line (its records span lines) and the
    column (model_output_2), not a row of the rebuilt node table."""
    import csv

    pairs = pd.read_csv(quality100 / "q100_gpt_3.5_edges.csv")
    pairs.loc[240, "model_output_2"] = ""  # record 240 starts after a record that spans two lines
    path = tmp_path / "empty.csv"
    pairs.to_csv(path, index=False)
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        starts, line = [], 2
        next(reader)
        for _ in reader:
            starts.append(line)
            line = reader.line_num + 1
    assert starts[240] != 240 + 2  # the file's line is not the record number
    with pytest.raises(SageInputError) as err:
        score_responses(path, metrics=("sge",), on=("answer",), sge_edges=("column:cosine_model_output",),
                        progress=False)
    assert f"line {starts[240]}: column 'model_output_2' is empty" in str(err.value)


def test_a_blank_question_id_in_a_pair_file_is_refused(quality100, tmp_path):
    pairs = pd.read_csv(quality100 / "q100_gpt_3.5_edges.csv")
    pairs["question_id"] = pairs["question_id"].astype("Int64")
    pairs.loc[3, "question_id"] = None
    path = tmp_path / "blank.csv"
    pairs.to_csv(path, index=False)
    with pytest.raises(SageInputError, match="line 5: column 'question_id' is empty"):
        score_responses(path, metrics=("sge",), on=("answer",), progress=False)
