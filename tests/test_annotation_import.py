"""Label import: label spellings, skips, duplicates, conflicts, unknown ids, broken files, text matching."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_annotation_data import responses_frame

from sage.annotation.importer import detect_annotator_columns, read_labels
from sage.annotation.labels import detect_scheme, normalise_label
from sage.annotation.pairs import build_pairs
from sage.errors import SageInputError


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
    path = _wide(tmp_path, pairs, {"a1": ["E"] * len(pairs), "a2": ["C"] * len(pairs)})
    df = pd.read_csv(path)
    df.loc[1, "pair_id"] = "answer-doesnotexist"
    df.to_csv(tmp_path / "unknown.csv", index=False)
    with pytest.raises(SageInputError, match="unknown.csv: row 3: unknown pair id 'answer-doesnotexist' in column "
                                             "'pair_id'.*--ignore-unknown"):
        read_labels(tmp_path / "unknown.csv", pairs)
    got = read_labels(tmp_path / "unknown.csv", pairs, ignore_unknown=True)
    unmatched = got.counts["unmatched"]
    assert unmatched["rows"] == 1 and unmatched["cells"] == 2  # one row, two annotators' labels
    assert unmatched["question_ids"] == [df.loc[1, "question_id"]]
    assert len(got.labels) == 2 * (len(pairs) - 1) and got.counts["pairs_in_manifest_without_labels"] == 1
    df = pd.read_csv(path)
    df.loc[0, "content_hash"] = "0" * 16
    df.to_csv(tmp_path / "hash.csv", index=False)
    with pytest.raises(SageInputError, match="row 2: pair .*column 'content_hash' 0+ differs from the pairs file"):
        read_labels(tmp_path / "hash.csv", pairs)
    # A changed text is a row that matches no pair: skipped and counted like an unknown id.
    got = read_labels(tmp_path / "hash.csv", pairs, ignore_unknown=True)
    assert got.counts["unmatched"]["rows"] == 1 and pairs.pair_id.iloc[0] not in set(got.labels.pair_id)


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
    """An outside file: model_output_1/2 texts (either order, other whitespace), no pair ids."""
    resp = responses_frame(models=("model-a", "model-b"))
    sub = pairs.sample(5, random_state=0)
    outside = pd.DataFrame({"model_output_1": [" " + t.replace(" ", "  ") for t in sub.text_a],
                            "model_output_2": sub.text_b.values, "rater1": "yes", "rater2": "no"})
    outside.loc[[1, 3], ["model_output_1", "model_output_2"]] = outside.loc[[1, 3], ["model_output_2", "model_output_1"]].values
    outside.to_csv(tmp_path / "outside.csv", index=False)
    with pytest.raises(SageInputError, match="pass --responses"):
        read_labels(tmp_path / "outside.csv", pairs)
    got = read_labels(tmp_path / "outside.csv", responses=resp, model="model-a")
    assert got.counts["matched_by_text"] == 5
    assert sorted(set(got.labels.pair_id)) == sorted(sub.pair_id)
    with pytest.raises(SageInputError, match="row 2: the texts occur in 2 questions/models.*pass --model"):
        read_labels(tmp_path / "outside.csv", responses=resp.assign(answer=resp.answer.str.replace(" [model-b]", "")))
    outside.loc[2, "model_output_2"] = "A text nobody wrote."
    outside.to_csv(tmp_path / "outside2.csv", index=False)
    with pytest.raises(SageInputError, match=r"outside2.csv: row 4: model_output_2 not found among the answer texts "
                                             r"of any question.*--ignore-unknown"):
        read_labels(tmp_path / "outside2.csv", responses=resp)


def test_question_id_narrows_text_matching_and_unmatched_rows_are_counted(tmp_path, pairs):
    resp = responses_frame()
    sheet = pairs[["question_id", "question", "text_a", "text_b"]].rename(
        columns={"text_a": "answer_1", "text_b": "answer_2"}).reset_index(drop=True)
    sheet["ann1"], sheet["ann2"], sheet["difficulty"] = "Y", "n", "hard"
    sheet.loc[0, "question_id"] = "q2"  # q1's texts under another question's id
    sheet.loc[7, "question_id"] = "q9"  # a question the responses do not have
    sheet.loc[14, "answer_1"] += " (edited)"
    sheet.to_csv(tmp_path / "sheet.csv", index=False)
    with pytest.raises(SageInputError, match="sheet.csv: row 2: answer_1 and answer_2 not found among the answer "
                                             "texts of question 'q2'"):
        read_labels(tmp_path / "sheet.csv", responses=resp)
    got = read_labels(tmp_path / "sheet.csv", responses=resp, ignore_unknown=True)
    assert got.counts["annotator_columns"] == ["ann1", "ann2"] and got.counts["columns_left_out"] == ["difficulty"]
    u = got.counts["unmatched"]
    assert u["rows"] == 3 and u["cells"] == 6 and u["question_ids"] == ["q2", "q3", "q9"]
    assert "row 9: question_id 'q9' is not a question of the responses" in u["examples"][1]
    kept = pairs.pair_id.drop(index=pairs.index[[0, 7, 14]])
    assert sorted(set(got.labels.pair_id)) == sorted(kept) and got.scheme == "binary"


def test_file_alone_gets_local_ids(tmp_path, pairs):
    """Without responses or pairs, (question_id, texts in either order) identify an item."""
    sheet = pairs[["question_id", "text_a", "text_b"]].rename(columns={"text_a": "model_output_1", "text_b": "model_output_2"})
    sheet = sheet.assign(ann1="Y", ann2="N", ann3="NA")
    swapped = sheet.iloc[[4]].rename(columns={"model_output_1": "model_output_2", "model_output_2": "model_output_1"})
    pd.concat([sheet, swapped]).to_csv(tmp_path / "alone.csv", index=False)
    got = read_labels(tmp_path / "alone.csv")
    assert got.counts["local_pair_ids"] == len(pairs) and got.counts["duplicates_collapsed"] == 2
    assert got.labels.pair_id.str.startswith("text-").all() and got.labels.pair_id.nunique() == len(pairs)
    assert got.counts["skipped_by_annotator"] == {"ann3": len(pairs) + 1}
    # The local ids are matched by their texts again once responses are given.
    long = got.labels.merge(got.pairs, on="pair_id")[["pair_id", "annotator", "label", "question_id", "text_a", "text_b"]]
    long.to_csv(tmp_path / "long.csv", index=False)
    again = read_labels(tmp_path / "long.csv", responses=responses_frame())
    assert sorted(set(again.labels.pair_id)) == sorted(pairs.pair_id)


@pytest.mark.parametrize("columns,expected,left_out", [
    (["question_id", "question", "model_output_1", "model_output_2", "ann1", "ann2", "ann3"], ["ann1", "ann2", "ann3"], []),
    (["question_id", "paraphrased_1", "model_output_1", "rot_1", "paraphrased_2", "model_output_2", "rot_2",
      "bleu_model_output", "rouge_model_output", "cosine_rot", "Annotator_Alice", "annotator bob"],
     ["Annotator_Alice", "annotator bob"], []),
    (["pair_id", "content_hash", "rater1", "judge_b", "comment2"], ["rater1", "judge_b"], ["comment2"]),
    (["pair_id", "content_hash", "model", "question_id", "alice", "bob"], ["alice", "bob"], []),
])
def test_annotator_columns_detected(columns, expected, left_out):
    assert detect_annotator_columns(columns) == (expected, left_out)


@pytest.mark.parametrize("values,where", [
    (["Y", "N", "maybe"], "row 4 column 'ann1'"),  # neither scheme
    (["Y", "yes", "E", "n", "1"], "row 4 column 'ann1'"),  # an NLI label in a Y/N file
])
def test_unknown_label_value_names_row_and_column(tmp_path, values, where):
    n = len(values)
    sheet = pd.DataFrame({"question_id": "q1", "answer_1": [f"a{i}" for i in range(n)], "answer_2": "b",
                          "ann1": values, "ann2": "Y"})
    sheet.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(SageInputError) as info:
        read_labels(tmp_path / "bad.csv")
    assert f"bad.csv: {where}: label" in str(info.value) and "\n" not in str(info.value)
