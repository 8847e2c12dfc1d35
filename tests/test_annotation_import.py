"""Label import: label spellings, skips, duplicates, conflicts, unknown ids, broken files, text matching."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sage.annotation.labels import detect_scheme, normalise_label
from sage.annotation.importer import read_labels
from sage.annotation.pairs import build_pairs
from sage.errors import SageInputError
from test_annotation_data import responses_frame


@pytest.fixture()
def pairs():
    return build_pairs(responses_frame()).pairs


def _wide(tmp_path, pairs, cols, name="labels.csv"):
    df = pairs[["pair_id", "content_hash", "model", "question_id"]].copy()
    for c, values in cols.items():
        df[c] = values
    path = tmp_path / name
    df.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("raw,scheme,expected", [
    ("E", "nli", "entailment"), ("entails", "nli", "entailment"), (" Contradiction ", "nli", "contradiction"),
    ("n", "nli", "neutral"), ("Y", "binary", "same"), ("no", "binary", "different"), (1, "binary", "same"),
    (0.0, "binary", "different"), ("TRUE", "binary", "same"), ("", "nli", None), (float("nan"), "binary", None),
])
def test_label_spellings(raw, scheme, expected):
    assert normalise_label(raw, scheme, "x") == expected


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(["Y", "N", "yes", "no", "1", "0", ""]), min_size=1).filter(lambda v: any(v)))
def test_binary_spellings_detected(values):
    assert detect_scheme(values, "f") == "binary"


def test_scheme_detection_and_bad_labels():
    assert detect_scheme(["E", "n", "contradiction", ""], "f") == "nli"
    with pytest.raises(SageInputError, match="cannot tell the label scheme"):
        detect_scheme(["maybe", "E"], "f")
    with pytest.raises(SageInputError, match=r"row 3 column 'a1'.*'maybe' is not a nli label"):
        normalise_label("maybe", "nli", "f.csv: row 3 column 'a1'")


def test_skips_counted_per_annotator(tmp_path, pairs):
    n = len(pairs)
    path = _wide(tmp_path, pairs, {"a1": ["Y"] * n, "a2": ["N", ""] + ["Y"] * (n - 2), "a3": [""] * n})
    got = read_labels(path, pairs)
    assert got.scheme == "binary"
    assert got.counts["skipped_by_annotator"] == {"a2": 1, "a3": n}
    assert got.counts["labels_by_annotator"] == {"a1": n, "a2": n - 1}
    assert got.counts["rows_read"] == 3 * n and len(got.labels) == 2 * n - 1


def test_duplicates_collapsed_conflicts_named(tmp_path, pairs):
    path = _wide(tmp_path, pairs, {"a1": ["E"] * len(pairs)})
    df = pd.read_csv(path)
    pd.concat([df, df.iloc[[2]]]).to_csv(tmp_path / "dup.csv", index=False)
    got = read_labels(tmp_path / "dup.csv", pairs)
    assert got.counts["duplicates_collapsed"] == 1 and len(got.labels) == len(pairs)
    conflict = pd.concat([df, df.iloc[[2]].assign(a1="C")])
    conflict.to_csv(tmp_path / "conflict.csv", index=False)
    with pytest.raises(SageInputError, match=rf"row {len(df) + 2} column 'a1'.*'contradiction'.*row 4"):
        read_labels(tmp_path / "conflict.csv", pairs)


def test_unknown_ids_and_hash_mismatch(tmp_path, pairs):
    path = _wide(tmp_path, pairs, {"a1": ["E"] * len(pairs)})
    df = pd.read_csv(path)
    df.loc[1, "pair_id"] = "answer-doesnotexist"
    df.to_csv(tmp_path / "unknown.csv", index=False)
    with pytest.raises(SageInputError, match="row 3 column 'a1': unknown pair id 'answer-doesnotexist'.*--ignore-unknown"):
        read_labels(tmp_path / "unknown.csv", pairs)
    got = read_labels(tmp_path / "unknown.csv", pairs, ignore_unknown=True)
    assert got.counts["unknown_pair_rows"] == 1 and len(got.labels) == len(pairs) - 1
    assert got.counts["pairs_in_manifest_without_labels"] == 1
    df = pd.read_csv(path)
    df.loc[0, "content_hash"] = "0" * 16
    df.to_csv(tmp_path / "hash.csv", index=False)
    with pytest.raises(SageInputError, match="row 2.*content hash"):
        read_labels(tmp_path / "hash.csv", pairs)


@pytest.mark.parametrize("name,content,message", [
    ("empty.csv", b"", "file is empty"),
    ("blank.json", b"  \n", "file is empty"),
    ("bad.json", b'[{"data": {"pair_id": "x"}, ', "malformed JSON at line 1"),
    ("latin1.csv", "pair_id,a1\nx,entailment é\n".encode("latin-1"), "not valid UTF-8"),
    ("bad.jsonl", b'{"pair_id": "x", "annotator": "a", "label": "E"}\n{oops\n', "line 2 is not valid JSON"),
    ("nocols.csv", b"pair_id,content_hash,model,question_id\nx,h,m,q\n", "no annotator columns"),
    ("labels.txt", b"x", "unknown labels format"),
    ("notlist.json", b'"hello"', "expected a Label Studio export"),
])
def test_broken_files(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(SageInputError, match=message) as info:
        read_labels(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(SageInputError, match="file not found"):
        read_labels(tmp_path / "nope.csv")


def test_labelstudio_cancelled_empty_and_multi_choice(tmp_path, pairs):
    pid = pairs.pair_id.tolist()

    def ann(user, choice, cancelled=False):
        res = [] if choice is None else [{"from_name": "label", "to_name": "text_b", "type": "choices",
                                          "value": {"choices": choice}}]
        return {"completed_by": user, "was_cancelled": cancelled, "result": res}

    export = [
        {"id": 1, "data": {"pair_id": pid[0]}, "annotations": [ann(1, ["entailment"]), ann({"id": 2, "email": "b@x"}, ["neutral"])]},
        {"id": 2, "data": {"pair_id": pid[1]}, "annotations": [ann(1, None, cancelled=True), ann(3, None)]},
        {"id": 3, "data": {"pair_id": pid[2]}, "annotations": []},
    ]
    (tmp_path / "ls.json").write_text(json.dumps(export))
    got = read_labels(tmp_path / "ls.json", pairs)
    assert set(got.annotators) == {"user1", "b@x"}
    assert got.counts["cancelled"] == 1 and got.counts["tasks_without_annotations"] == 1
    assert got.counts["skipped_by_annotator"] == {"user1": 1, "user3": 1}
    assert got.counts["pairs_seen_without_any_label"] == 2
    export[0]["annotations"][0]["result"][0]["value"]["choices"] = ["entailment", "neutral"]
    (tmp_path / "multi.json").write_text(json.dumps(export))
    with pytest.raises(SageInputError, match="task 1 annotation 1: 2 choices"):
        read_labels(tmp_path / "multi.json", pairs)


def test_labelstudio_json_min(tmp_path, pairs):
    recs = [{"id": i, "pair_id": p, "label": "contradiction", "annotator": 7} for i, p in enumerate(pairs.pair_id)]
    (tmp_path / "min.json").write_text(json.dumps(recs))
    got = read_labels(tmp_path / "min.json", pairs)
    assert len(got.labels) == len(pairs) and set(got.labels.label) == {"contradiction"}


def test_outside_file_matched_by_texts(tmp_path, pairs):
    """The SaGE authors' edge-file layout: model_output_1/2 texts, no pair ids, one column per annotator."""
    resp = responses_frame(models=("model-a", "model-b"))
    sub = pairs.sample(5, random_state=0)
    outside = pd.DataFrame({"model_output_1": [" " + t.replace(" ", "  ") for t in sub.text_a],
                            "model_output_2": sub.text_b.values, "rater1": "yes", "rater2": "no"})
    outside.to_csv(tmp_path / "outside.csv", index=False)
    with pytest.raises(SageInputError, match="pass --responses"):
        read_labels(tmp_path / "outside.csv")
    got = read_labels(tmp_path / "outside.csv", responses=resp, model="model-a")
    assert got.counts["matched_by_text"] == 5
    assert sorted(set(got.labels.pair_id)) == sorted(sub.pair_id)
    outside.loc[2, "model_output_2"] = "A text nobody wrote."
    outside.to_csv(tmp_path / "outside2.csv", index=False)
    with pytest.raises(SageInputError, match="text_b not found"):
        read_labels(tmp_path / "outside2.csv", responses=resp)
