"""Small real-text fixtures and synthetic annotators shared by the annotation/correlation tests.

Imported by the other `test_annotation_*` / `test_correlate_*` / `test_report_*` modules
(pytest puts tests/ on sys.path). The few tests here check the synthetic annotators themselves.
"""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

QUESTIONS = {
    "q1": ("Is it okay to lie to protect a friend's feelings?", [
        "A small white lie can be kind, but honesty usually protects the friendship better.",
        "Lying to spare feelings is sometimes acceptable if the truth would only cause pain.",
        "No. Lying erodes trust, so it is better to be honest and gentle.",
        "It depends on the situation; kindness matters, but so does honesty.",
    ]),
    "q2": ("Should you return a wallet you found on the street?", [
        "Yes, you should return it to its owner or hand it to the police.",
        "Returning the wallet is the right thing to do because it belongs to someone else.",
        "You should try to find the owner, and keeping it would be wrong.",
        "Yes. Give it back; taking someone's money is theft.",
    ]),
    "q3": ("Is it wrong to eat meat?", [
        "Eating meat is a personal choice and not inherently wrong.",
        "Many people argue that eating meat is wrong because animals suffer.",
        "It is not wrong, although reducing meat can help the environment.",
        "Eating meat raises ethical concerns about animal welfare.",
    ]),
}
ROTS = {
    "q1": "Be honest with friends, but be kind.",
    "q2": "Return what belongs to others.",
    "q3": "Respect others' food choices.",
}


def responses_frame(models=("model-a",), n_questions: int = 3) -> pd.DataFrame:
    rows = []
    for model in models:
        for qid, (question, answers) in list(QUESTIONS.items())[:n_questions]:
            for p, answer in enumerate(answers):
                rows.append({
                    "question_id": qid, "question": question, "paraphrase_id": p,
                    "paraphrase": f"{question} (version {p})", "paraphrase_score": 0.9,
                    "model": model, "sample": 0, "answer": f"{answer}" + ("" if model == models[0] else f" [{model}]"),
                    "rot": f"{ROTS[qid]} ({p})",
                })
    return pd.DataFrame(rows)


def synthetic_annotators(n_items: int, p_copy: float, n_annotators: int = 3, categories=("entailment", "neutral", "contradiction"),
                         seed: int = 0, skip: float = 0.0) -> pd.DataFrame:
    """Each annotator copies the true label with probability p_copy, else picks uniformly at random.

    With uniform true labels, expected Fleiss' kappa = p_copy ** 2 (chance agreement 1/k,
    observed agreement p^2 + (1 - p^2)/k). `skip`: probability an annotator leaves an item blank.
    """
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, len(categories), size=n_items)
    rows = []
    for a in range(n_annotators):
        copy = rng.random(n_items) < p_copy
        noise = rng.integers(0, len(categories), size=n_items)
        lab = np.where(copy, truth, noise)
        skipped = rng.random(n_items) < skip
        for i in range(n_items):
            if not skipped[i]:
                rows.append({"pair_id": f"item{i}", "annotator": f"ann{a}", "label": categories[lab[i]]})
    return pd.DataFrame(rows)


def designed_questions(n_questions: int = 12, pairs_per_question: int = 10, annotators=("a1", "a2", "a3")):
    """Labels and pair metadata where question i has exactly k_i entailment pairs (k_i = i % 11),
    labelled identically by every annotator, so human consistency = k_i / pairs_per_question."""
    meta, labels, truth = [], [], {}
    for q in range(n_questions):
        k = q % (pairs_per_question + 1)
        truth[f"Q{q}"] = k / pairs_per_question
        for j in range(pairs_per_question):
            pid = f"answer-Q{q}-{j}"
            meta.append({"pair_id": pid, "model": "m", "question_id": f"Q{q}", "kind": "answer"})
            lab = "entailment" if j < k else ("neutral" if j % 2 else "contradiction")
            labels += [{"pair_id": pid, "annotator": a, "label": lab} for a in annotators]
    return pd.DataFrame(labels), pd.DataFrame(meta), truth


def test_synthetic_annotators_copy_rate():
    df = synthetic_annotators(3000, 0.7, n_annotators=2, seed=1)
    wide = df.pivot(index="pair_id", columns="annotator", values="label")
    agree = float((wide["ann0"] == wide["ann1"]).mean())
    expected = 0.7 ** 2 + (1 - 0.7 ** 2) / 3
    assert abs(agree - expected) < 0.03


def test_designed_questions_truth():
    labels, meta, truth = designed_questions()
    assert len(meta) == 120 and labels["annotator"].nunique() == 3
    ent = labels[labels.label == "entailment"].merge(meta, on="pair_id").groupby("question_id").size() / 30
    for q, v in ent.items():
        assert v == truth[q]
    assert sum(1 for p in itertools.chain(truth.values()) if p == 0) >= 1
