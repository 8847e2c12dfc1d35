"""Scoring in chunks of whole questions: the same numbers however the table is chunked, ordered
or stored (CSV, JSONL, Parquet), with outputs streamed to disk."""
from __future__ import annotations

import pandas as pd
import pytest

from sage.data.response_stream import index_table, question_chunks
from sage.errors import SageInputError
from sage.scoring import score_responses

METRICS = ("sge", "bleu", "rouge_l", "bertscore", "cosine")


@pytest.fixture(scope="module")
def table(quality100):
    df = pd.read_csv(quality100 / "q100_gpt_3.5_rot.csv")
    return df[df["question_id"].isin(df["question_id"].unique()[:12])].reset_index(drop=True)


def _score(source, **kw):
    return score_responses(source, metrics=METRICS, n_boot=100, progress=False, **kw)


def test_chunk_size_order_and_format_do_not_change_a_number(table, tmp_path):
    whole = _score(table, chunk_questions=1000).questions
    assert len(whole) == 12
    for chunk in (1, 5):
        pd.testing.assert_frame_equal(_score(table, chunk_questions=chunk).questions, whole)
    # questions interleaved row by row (each question's own rows keep their order; BLEU's
    # reference is the earlier text): every question still gets all its rows
    rank = table.groupby("question_id").cumcount()
    interleaved = table.iloc[rank.sort_values(kind="stable").index].reset_index(drop=True)
    assert interleaved["question_id"].iloc[0] != interleaved["question_id"].iloc[1]
    got = _score(interleaved, chunk_questions=4).questions.set_index("question_id").loc[whole["question_id"]]
    pd.testing.assert_frame_equal(got.reset_index()[whole.columns], whole)
    for suffix in (".csv", ".jsonl", ".parquet"):
        path = tmp_path / f"t{suffix}"
        if suffix == ".csv":
            table.to_csv(path, index=False)
        elif suffix == ".jsonl":
            table.to_json(path, orient="records", lines=True)
        else:
            table.to_parquet(path, index=False)
        res = _score(path, chunk_questions=5, default_model="model")
        pd.testing.assert_frame_equal(res.questions, whole)


def test_outputs_streamed_to_disk_equal_the_in_memory_result(table, tmp_path):
    mem = _score(table, chunk_questions=5)
    for fmt in ("csv", "parquet"):
        out = tmp_path / fmt
        res = _score(table, chunk_questions=5, out_dir=out, table_format=fmt)
        assert res.responses is None and res.edges is None  # streamed, not held
        res.write(out, fmt)
        read = pd.read_csv if fmt == "csv" else pd.read_parquet
        edges = read(out / f"edges.{fmt}")
        assert len(edges) == len(mem.edges) == 12 * 10 * 2  # C(5, 2) pairs, answers and RoTs
        pd.testing.assert_series_equal(edges["cosine"], mem.edges["cosine"], check_exact=False, rtol=1e-9)
        responses = read(out / f"responses.{fmt}")
        assert responses["answer"].tolist() == mem.responses["answer"].tolist()
        questions = read(out / f"questions.{fmt}")
        assert questions["sge_answer"].tolist() == pytest.approx(mem.questions["sge_answer"].tolist(), rel=1e-12)


def test_small_reads_keep_questions_whole_and_rows_numbered_globally(table, tmp_path):
    path = tmp_path / "t.csv"
    bad = table.copy()
    bad.loc[30, "model_output"] = ""  # data row 31
    bad.to_csv(path, index=False)
    idx = index_table(path, ("answer", "rot"), str(path), rows=7)  # reads of 7 rows split questions
    assert idx.report.bad_rows == {31: "column 'answer' is empty or NaN"}
    chunks = list(question_chunks(path, idx, str(path), chunk_questions=5, rows=7))
    assert [c["question_id"].nunique() for c in chunks] == [5, 5, 2]
    sizes = pd.concat(chunks).groupby("question_id").size()
    assert sizes.sum() == len(table) - 1 and (sizes >= 4).all()
    with pytest.raises(SageInputError, match="row 31: column 'answer' is empty"):
        score_responses(path, metrics=("bleu",), progress=False)
    skipped = score_responses(path, metrics=("bleu",), progress=False, skip_invalid=True)
    assert skipped.summary["skipped_rows"] == [31]
