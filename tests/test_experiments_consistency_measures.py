"""experiments/consistency_measures.py: table.md is rendered from the committed records alone, the
discordant-pair count equals a brute-force count, the separation cases' graphs are what they say,
and the README's measures section quotes the records (issue 58 item 2)."""
from __future__ import annotations

import importlib.util
import json
import re
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "experiments" / "consistency_measures.py"
RESULTS = REPO / "experiments" / "results" / "consistency_measures"
Q100, VICUNA = "q100_gpt_3.5_edges", "vicuna-7b-v1.5_0"
STSB = "column:cosine_model_output"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("consistency_measures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def summary():
    return json.loads((RESULTS / "summary.json").read_text())


def test_table_is_rendered_from_the_records(script):
    assert script.render(RESULTS) == (RESULTS / "table.md").read_text()


def test_records_match_the_question_tables(script, summary):
    """summary.json's Spearman / discordant records are those of the committed per-question tables."""
    for key in (Q100, VICUNA):
        q = pd.read_csv(RESULTS / f"questions_{key}.csv")
        cols = script.measure_columns([STSB, "cosine"], False)[STSB]
        assert script.against_mean_similarity(q, cols) == summary["against_meansim"][key][STSB]
        c = pd.read_csv(RESULTS / f"cases_{key}.csv")
        for case in script.CASES:
            assert script.against_mean_similarity(c, [f"{m}_{case}" for m in script.SHOWN]) == \
                summary["cases"][key]["against_meansim"][case]


def test_discordant_pairs_by_brute_force(script):
    rng = np.random.default_rng(3)
    m = np.round(rng.uniform(size=30), 1)  # ties in the mean similarity
    frame = pd.DataFrame({"meansim_answer": m, "sge_answer": m + rng.normal(0, 0.1, 30),
                          "eigv_answer": -m + rng.normal(0, 0.1, 30), "degree_answer": 1 - m})
    rec = script.against_mean_similarity(frame, list(frame.columns))
    for col, sign in (("sge_answer", 1), ("eigv_answer", -1), ("degree_answer", -1)):
        x = sign * frame[col].to_numpy()
        disc = sum((x[i] - x[j]) * (m[i] - m[j]) < 0 for i, j in combinations(range(30), 2))
        assert rec[col]["discordant"] == disc and rec[col]["question_pairs"] == 435
    assert rec["degree_answer"]["discordant"] == 0 and rec["eigv_answer"]["spearman"] > 0


def _pair_frame(n_questions=4, n=5, seed=1):
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_questions):
        for i, j in combinations(range(n), 2):
            rows.append({"question_id": q, "paraphrased_1": f"p{q}.{i}", "model_output_1": f"a{q}.{i}",
                         "rot_1": f"r{q}.{i}", "paraphrased_2": f"p{q}.{j}", "model_output_2": f"a{q}.{j}",
                         "rot_2": f"r{q}.{j}", "cosine_model_output": rng.uniform()})
    return pd.DataFrame(rows)


def test_case_graphs(script):
    pairs = _pair_frame(n_questions=12)
    s, tau = pairs["cosine_model_output"], pairs["cosine_model_output"].median()
    frames = script.case_frames(pairs, "cosine_model_output", seed=0)
    binary, rec = frames["binary"]
    assert rec["threshold"] == tau and set(binary[script.CASE_COLUMN]) == {0.0, 1.0}
    assert (binary[script.CASE_COLUMN] == (s > tau)).all() and rec["pairs_joined"] == 0.5
    sparse, _ = frames["sparse"]
    assert np.array_equal(sparse[script.CASE_COLUMN], np.where(s > tau, s, 0.0))
    varied, rec = frames["n_varies"]
    assert np.array_equal(varied[script.CASE_COLUMN], varied["cosine_model_output"])
    ns = {}
    for q, g in varied.groupby("question_id"):
        nodes = set(g["model_output_1"]) | set(g["model_output_2"])
        assert len(g) == len(nodes) * (len(nodes) - 1) // 2  # the complete graph on the kept answers
        ns[len(nodes)] = ns.get(len(nodes), 0) + 1
    assert set(ns) <= {3, 4, 5} and len(ns) > 1
    assert rec["questions_per_n"] == {str(k): v for k, v in sorted(ns.items())}


def _fmt(r):
    return f"{r['spearman']:.5f} ({r['discordant']})"


def test_readme_quotes_the_records(summary):
    text = re.sub(r"\s+", " ", (REPO / "README.md").read_text())
    start = text.index("On the SaGE authors' two released answer files")
    section = text[start:text.index("SGE's range:", start)]
    dense = summary["against_meansim"]
    for key in (Q100, VICUNA):
        for m in ("degree", "kle", "sge", "eigv", "eccentricity", "num_sets"):
            assert _fmt(dense[key][STSB][f"{m}_answer"]) in section, (key, m)
    cases = {k: summary["cases"][k]["against_meansim"] for k in (Q100, VICUNA)}
    quoted = [(Q100, "binary", "eigv"), (VICUNA, "binary", "eigv"), (Q100, "binary", "eccentricity"),
              (VICUNA, "binary", "eccentricity"), (Q100, "n_varies", "kle"), (Q100, "n_varies", "sge"),
              (VICUNA, "n_varies", "kle"), (VICUNA, "n_varies", "sge")]
    for key, case, m in quoted:
        assert _fmt(cases[key][case][f"{m}_{case}"]) in section, (key, case, m)
    for key, case, m in ((Q100, "binary", "num_sets"), (VICUNA, "binary", "num_sets"), (Q100, "binary", "sge"),
                         (Q100, "binary", "kle"), (Q100, "n_varies", "eigv"), (Q100, "n_varies", "degree"),
                         (VICUNA, "n_varies", "eigv"), (VICUNA, "n_varies", "degree")):
        assert f"{cases[key][case][f'{m}_{case}']['spearman']:.5f}" in section, (key, case, m)
    assert cases[Q100]["binary"]["degree_binary"]["discordant"] == 0
    assert f"on Vicuna {summary['datasets'][VICUNA]['clipped_pairs']['below_0']} pair cosines are negative" in section
    q = {k: pd.read_csv(RESULTS / f"questions_{k}.csv") for k in (Q100, VICUNA)}
    shares = [f"{(q[k]['num_sets_answer'] == 1).mean():.0%}" for k in (Q100, VICUNA)]
    assert f"({shares[0]} and {shares[1]};" in section
