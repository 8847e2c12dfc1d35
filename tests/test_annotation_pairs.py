"""Pairs: C(n,2) per question, stable ids and hashes, seeded sampling; exports and their round trips."""
from __future__ import annotations

import itertools
import json
from math import comb

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_annotation_data import QUESTIONS, responses_frame

from sage.annotation.export import labeling_config, labelstudio_tasks, write_exports
from sage.annotation.importer import read_labels, read_pairs
from sage.annotation.pairs import build_pairs, content_hash, pair_id
from sage.errors import SageInputError


def test_all_pairs_per_question_and_model():
    df = responses_frame(models=("model-a", "model-b"))
    ps = build_pairs(df, kinds=("answer", "rot"))
    assert ps.counts["pairs"] == 2 * 3 * 2 * comb(4, 2)  # models x questions x kinds x C(4,2)
    assert ps.pairs["pair_id"].is_unique
    one = ps.pairs[(ps.pairs.model == "model-a") & (ps.pairs.question_id == "q1") & (ps.pairs.kind == "answer")]
    expected = {(a, b) for a, b in itertools.combinations(QUESTIONS["q1"][1], 2)}
    assert set(zip(one.text_a, one.text_b)) == expected
    row = one.iloc[0]
    assert row.pair_id == pair_id("model-a", "q1", "answer", row.key_a, row.key_b)
    assert row.content_hash == content_hash(row.text_a, row.text_b)


def test_ids_stable_under_row_order_and_other_questions():
    df = responses_frame()
    full = build_pairs(df).pairs.set_index("pair_id")
    shuffled = build_pairs(df.sample(frac=1.0, random_state=3)).pairs.set_index("pair_id")
    assert full.sort_index().equals(shuffled.sort_index())
    only_q2 = build_pairs(df[df.question_id == "q2"]).pairs
    assert set(only_q2.pair_id) <= set(full.index)


@settings(max_examples=25, deadline=None)
@given(k=st.integers(1, 6), seed=st.integers(0, 10_000))
def test_seeded_sample_is_a_reproducible_subset(k, seed):
    df = responses_frame()
    full = set(build_pairs(df).pairs.pair_id)
    a = build_pairs(df, max_pairs=k, seed=seed).pairs
    b = build_pairs(df.iloc[::-1], max_pairs=k, seed=seed).pairs
    assert sorted(a.pair_id) == sorted(b.pair_id)
    assert set(a.pair_id) <= full
    assert a.groupby("question_id").size().tolist() == [min(k, 6)] * 3
    # A question's sample does not depend on the other questions.
    alone = build_pairs(df[df.question_id == "q3"], max_pairs=k, seed=seed).pairs
    assert set(alone.pair_id) == set(a[a.question_id == "q3"].pair_id)


def test_blank_answers_counted_and_errors():
    df = responses_frame()
    df.loc[0, "answer"] = "  "
    ps = build_pairs(df)
    assert ps.counts["blank_texts"] == 1 and ps.counts["pairs"] == 3 + 6 + 6
    with pytest.raises(SageInputError, match="missing column 'answer'"):
        build_pairs(df.drop(columns=["answer"]), source="r.csv")
    with pytest.raises(SageInputError, match="occurs 2 times"):
        build_pairs(pd.concat([df, df.iloc[[1]]]))
    with pytest.raises(SageInputError, match="no 'rot' column"):
        build_pairs(df.drop(columns=["rot"]), kinds=("rot",))


def test_labeling_configs_are_valid_xml_with_the_choices():
    import xml.etree.ElementTree as ET

    for scheme, choices in (("nli", ["entailment", "neutral", "contradiction"]), ("binary", ["same", "different"])):
        root = ET.fromstring(labeling_config(scheme))
        ch = root.find("Choices")
        assert ch.get("name") == "label" and ch.get("toName") == "text_b"
        assert [c.get("value") for c in ch.findall("Choice")] == choices
        assert {t.get("name") for t in root.findall("Text")} == {"text_a", "text_b"}


def test_labelstudio_tasks_with_predictions():
    ps = build_pairs(responses_frame())
    pred = pd.DataFrame({"pair_id": ps.pairs.pair_id[:2], "label": ["entailment", "contradiction"], "score": [0.9, 0.1]})
    tasks = labelstudio_tasks(ps.pairs, pred)
    assert len(tasks) == len(ps.pairs)
    assert tasks[0]["data"]["pair_id"] == ps.pairs.pair_id[0]
    assert tasks[1]["predictions"][0]["result"][0]["value"]["choices"] == ["contradiction"]
    assert "predictions" not in tasks[2]
    json.dumps(tasks)  # serialisable
    with pytest.raises(SageInputError, match="not nli labels"):
        labelstudio_tasks(ps.pairs, pred.assign(label="same"))


def _fake_labelstudio_export(tasks, annotators):
    """What Label Studio's JSON export looks like: tasks with data + annotations (completed_by ids)."""
    out = []
    for t, task in enumerate(tasks):
        anns = [{"id": 100 * t + u, "completed_by": u, "was_cancelled": False,
                 "result": [{"from_name": "label", "to_name": "text_b", "type": "choices",
                             "value": {"choices": [lab(task["data"])]}}]} for u, lab in annotators.items()]
        out.append({"id": t + 1, "data": task["data"], "annotations": anns})
    return out


def test_round_trip_every_format(tmp_path):
    ps = build_pairs(responses_frame(), kinds=("answer", "rot"), max_pairs=4, seed=7)
    written = write_exports(ps, tmp_path, annotators=("alice", "bob"))
    meta = json.loads((tmp_path / "export_meta.json").read_text())
    assert meta["seed"] == 7 and meta["counts"]["pairs"] == len(ps.pairs)
    truth = {p: ("entailment", "neutral", "contradiction")[i % 3] for i, p in enumerate(ps.pairs.pair_id)}
    pairs_csv, pairs_jsonl = read_pairs(written["csv"]), read_pairs(written["jsonl"])
    assert list(pairs_csv.pair_id) == list(pairs_jsonl.pair_id) == list(ps.pairs.pair_id)

    # (a) CSV filled in a spreadsheet: one column per annotator, Y/N style spellings for binary.
    sheet = pd.read_csv(written["csv"], dtype=str, keep_default_na=False)
    sheet["alice"] = [truth[p][0].upper() for p in sheet.pair_id]  # E / N / C
    sheet["bob"] = [truth[p] for p in sheet.pair_id]
    sheet.loc[0, "bob"] = ""  # a skip
    sheet.to_csv(tmp_path / "filled.csv", index=False)
    got = read_labels(tmp_path / "filled.csv", pairs_csv)
    assert got.scheme == "nli" and got.counts["skipped_by_annotator"] == {"bob": 1}
    assert len(got.labels) == 2 * len(ps.pairs) - 1
    assert all(truth[p] == lab for p, lab in zip(got.labels.pair_id, got.labels.label))

    # (b) Label Studio export of the exported tasks.
    tasks = json.loads(open(written["labelstudio"]).read())
    export = _fake_labelstudio_export(tasks, {1: lambda d: truth[d["pair_id"]], 2: lambda d: truth[d["pair_id"]]})
    (tmp_path / "ls.json").write_text(json.dumps(export))
    got = read_labels(tmp_path / "ls.json", pairs_jsonl)
    assert set(got.annotators) == {"user1", "user2"} and len(got.labels) == 2 * len(ps.pairs)
    assert all(truth[p] == lab for p, lab in zip(got.labels.pair_id, got.labels.label))
    assert set(got.pairs.columns) >= {"model", "question_id", "kind"}

    # (c) JSONL with a labels object per pair.
    with open(tmp_path / "labels.jsonl", "w") as fh:
        for rec in map(json.loads, open(written["jsonl"])):
            rec["labels"] = {"carol": "yes" if truth[rec["pair_id"]] == "entailment" else "no"}
            fh.write(json.dumps(rec) + "\n")
    got = read_labels(tmp_path / "labels.jsonl", pairs_csv)
    assert got.scheme == "binary"
    assert all((truth[p] == "entailment") == (lab == "same") for p, lab in zip(got.labels.pair_id, got.labels.label))


def test_predictions_from_a_toolkit_similarity():
    """Pre-annotations from the toolkit's own ROUGE-L similarity, checked against rouge_score directly."""
    from rouge_score import rouge_scorer

    from sage.annotation.export import predictions_from_similarity
    from sage.metrics.similarity import build_similarity

    pairs = build_pairs(responses_frame()).pairs
    pred = predictions_from_similarity(pairs, build_similarity("rouge_l"), "nli", high=0.5, low=0.2)
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    ref = [scorer.score(a, b)["rougeL"].fmeasure for a, b in zip(pairs.text_a, pairs.text_b)]
    assert pred.score.tolist() == pytest.approx(ref, abs=1e-9)
    assert pred.label.tolist() == ["entailment" if s >= 0.5 else ("contradiction" if s < 0.2 else "neutral") for s in ref]
    binary = predictions_from_similarity(pairs, build_similarity("rouge_l"), "binary", high=0.3)
    assert set(binary.label) <= {"same", "different"}
