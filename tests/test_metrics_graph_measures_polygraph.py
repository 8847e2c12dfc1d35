"""sage's graph measures against LM-Polygraph's own estimators (lm-polygraph 0.7.0 from PyPI,
`src/lm_polygraph/estimators/`: EigValLaplacian, DegMat, Eccentricity, KernelLanguageEntropy,
NumSemSets, LexicalSimilarity) on the same matrices, to 1e-6: random NLI probability matrices,
then a whole `score_responses` run on NLI edges from a tiny NLI model, its edges.csv fed to
LM-Polygraph.

lm-polygraph is in the `test` extra (it installs beside torch 2.13.0 and transformers 5.16-5.24:
`pip install lm-polygraph==0.7.0` added 40 packages, 112 MB downloaded, in about a minute).
Slow: importing it loads datasets, spacy and bitsandbytes (about 20 s)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fixtures_nli import LABEL_ORDERS, make_tiny_nli

from sage.metrics import graph_measures as gm

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pg():
    pytest.importorskip("lm_polygraph", reason="lm-polygraph not installed: pip install 'sage-consistency[test]'")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from lm_polygraph.estimators.deg_mat import DegMat
        from lm_polygraph.estimators.eccentricity import Eccentricity
        from lm_polygraph.estimators.eig_val_laplacian import EigValLaplacian
        from lm_polygraph.estimators.kernel_language_entropy import (
            KernelLanguageEntropy,
        )
        from lm_polygraph.estimators.lexical_similarity import LexicalSimilarity
        from lm_polygraph.estimators.num_sem_sets import NumSemSets
    return {"eigv": EigValLaplacian, "degree": DegMat, "eccentricity": Eccentricity, "kle": KernelLanguageEntropy,
            "num_sets": NumSemSets, "lexsim": LexicalSimilarity}


def _stats(e, c, n):
    return {"semantic_matrix_entail": e[None], "semantic_matrix_contra": c[None], "sample_texts": [["x"] * n]}


def _graded(e, c):
    """Mean over both directions of P(entail) + 0.5 P(neutral), sage's `--nli-edge graded`."""
    w = e + 0.5 * (1.0 - e - c)
    return (w + w.T) / 2


def test_estimators_equal_on_random_nli_matrices(pg):
    rng = np.random.default_rng(0)
    for _ in range(60):
        n = int(rng.integers(2, 11))
        p = rng.dirichlet([0.6, 0.6, 0.6], size=(n, n))
        e, c = p[..., 0].copy(), p[..., 2].copy()
        np.fill_diagonal(e, 1.0)  # a text entails itself, as sage scores identical texts
        np.fill_diagonal(c, 0.0)
        st = _stats(e, c, n)
        w = gm.affinity((e + e.T) / 2)  # LM-Polygraph's `entail` affinity
        assert gm.eigv(w) == pytest.approx(pg["eigv"]()(st)[0], abs=1e-6)
        assert gm.degree(w) == pytest.approx(pg["degree"]()(st)[0], abs=1e-6)
        assert gm.eccentricity(w) == pytest.approx(pg["eccentricity"]()(st)[0], abs=1e-6)
        wc = gm.affinity(1.0 - (c + c.T) / 2)  # its `contra` affinity
        assert gm.eigv(wc) == pytest.approx(pg["eigv"](affinity="contra")(st)[0], abs=1e-6)
        assert gm.eccentricity(wc) == pytest.approx(pg["eccentricity"](affinity="contra")(st)[0], abs=1e-6)
        wg = gm.affinity(_graded(e, c))
        kle = gm.kle(wg)
        assert kle == pytest.approx(pg["kle"](scale=False)(st)[0], abs=1e-6)
        assert kle / np.log(n) == pytest.approx(pg["kle"]()(st)[0], abs=1e-6)  # its default divides by ln n
        assert gm.num_sets(e > c) == pg["num_sets"]()(st)[0]


@pytest.fixture(scope="module")
def nli_model(tmp_path_factory):
    return make_tiny_nli(tmp_path_factory.mktemp("nli") / "tiny", LABEL_ORDERS["mnli"])


def _directional(edges: pd.DataFrame, keys: list[str], value: str) -> np.ndarray:
    """n x n matrix of one directional NLI value from edges.csv (premise = row)."""
    pos = {k: i for i, k in enumerate(keys)}
    m = np.eye(len(keys)) if value == "p_entailment" else np.zeros((len(keys), len(keys)))
    for r in edges.itertuples():
        a, b = pos[r.key_a], pos[r.key_b]
        m[a, b] = getattr(r, f"nli_{value}_ab")
        m[b, a] = getattr(r, f"nli_{value}_ba")
    return m


def test_a_scored_run_equals_lm_polygraph_on_its_own_edges(pg, nli_model):
    from sage.metrics.similarity import SimilarityOptions
    from sage.scoring import score_responses

    answers = {
        "q1": ["Yes, lying to a friend is wrong.", "No, small lies are fine.", "Lying breaks trust, so it is wrong.",
               "It depends on the lie."],
        "q2": ["Return it to the owner.", "Keep it; finders keepers.", "Hand it in to the police.",
               "Return the wallet and the cash.", "Give it back."],
    }
    df = pd.DataFrame([{"question_id": q, "question": f"Question {q}?", "paraphrase_id": k, "answer": a}
                       for q, texts in answers.items() for k, a in enumerate(texts)])
    q = {}
    for edge in ("entail", "graded"):
        res = score_responses(df, metrics=("num_sets", "eigv", "degree", "eccentricity", "kle", "lexsim"),
                              sge_edges=("nli",), on=("answer",), progress=False, n_boot=10,
                              similarity=SimilarityOptions(nli_model=str(nli_model), nli_edge=edge))
        q[edge], edges = res.questions.set_index("question_id"), res.edges
    for qid, texts in answers.items():
        keys = [f"p{k}.s0" for k in range(len(texts))]
        e = edges[edges.question_id == qid]
        st = _stats(_directional(e, keys, "p_entailment"), _directional(e, keys, "p_contradiction"), len(keys))
        st["sample_texts"] = [texts]
        assert q["entail"].loc[qid, "eigv_answer"] == pytest.approx(pg["eigv"]()(st)[0], abs=1e-6)
        assert q["entail"].loc[qid, "degree_answer"] == pytest.approx(pg["degree"]()(st)[0], abs=1e-6)
        assert q["entail"].loc[qid, "eccentricity_answer"] == pytest.approx(pg["eccentricity"]()(st)[0], abs=1e-6)
        assert q["graded"].loc[qid, "kle_answer"] == pytest.approx(pg["kle"](scale=False)(st)[0], abs=1e-6)
        assert q["entail"].loc[qid, "num_sets_answer"] == pg["num_sets"]()(st)[0]
        # LexicalSimilarity(rougeL) is minus the mean pairwise ROUGE-L: sage's rouge_l (lexsim) column
        assert q["entail"].loc[qid, "rouge_l_answer"] == pytest.approx(-pg["lexsim"]()(st)[0], abs=1e-9)
