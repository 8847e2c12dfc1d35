"""Corpora for key statistics: plain text, JSONL, the SaGE Vicuna-7B responses (default), and
one-line errors for bad files."""
from __future__ import annotations

import json

import pytest

from sage.editing import key_statistics as stats
from sage.errors import SageInputError


def test_plain_text_and_jsonl_corpora(tmp_path):
    plain = tmp_path / "c.txt"
    plain.write_text("One sentence.\n\nAnother one.")
    assert stats.load_corpus(plain).text == "One sentence.\n\nAnother one."
    jl = tmp_path / "c.jsonl"
    jl.write_text("\n".join([json.dumps({"text": "first text", "id": 3}), "",
                             json.dumps("a bare string"),
                             json.dumps({"title": "no text field", "body": "so both strings"})]))
    got = stats.load_corpus(jl)
    assert got.text == "first text\n\na bare string\n\nno text field\nso both strings"
    assert got.source == "file c.jsonl"


@pytest.mark.parametrize("content,match", [
    (b"", "has no text"),
    (b"\xff\xfe\x00bad", "not UTF-8"),
    (b'{"text": "fine"}\n{broken\n', "line 2: malformed JSON"),
])
def test_bad_corpus_files_fail_with_one_line(tmp_path, content, match):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(SageInputError, match=match):
        stats.load_corpus(path)
    with pytest.raises(SageInputError, match="not found"):
        stats.load_corpus(tmp_path / "missing.txt")


def test_responses_corpus_takes_distinct_answers_and_rots_in_a_fixed_order(tmp_path, monkeypatch):
    import pandas as pd

    rows = {"question_id": [1, 1], "paraphrased_1": ["q a", "q a"], "model_output_1": ["A1", "A1"],
            "rot_1": ["R1", "R1"], "paraphrased_2": ["q b", "q c"], "model_output_2": ["A2", "A3"],
            "rot_2": ["R2", None]}
    pd.DataFrame(rows).to_csv(tmp_path / "m_0.csv", index=False)
    corpus = stats.responses_corpus(tmp_path)
    parts = corpus.text.split("\n\n")
    assert sorted(parts) == ["A1", "A2", "A3", "R1", "R2"]  # questions left out, duplicates once
    assert stats.responses_corpus(tmp_path).text == corpus.text  # same order every time
    monkeypatch.setenv("SAGE_SHARED_DATA", str(tmp_path.parent))
    (tmp_path.parent / "sage-responses").mkdir()
    (tmp_path / "m_0.csv").rename(tmp_path.parent / "sage-responses" / "m_0.csv")
    assert stats.responses_dir() == tmp_path.parent / "sage-responses"
    assert stats.corpus_name(None) == "sage-responses (default)"
    assert stats.corpus_name("my.txt") == "my.txt"


@pytest.mark.slow
def test_the_shared_vicuna_responses_hold_100x_the_key_dimension(shared_data, bundled_lm):
    """The default corpus has at least 153,600 tokens (100 x SmolLM2-135M's 1,536 key dims)."""
    corpus = stats.responses_corpus(shared_data / "sage-responses")
    ids = stats._first_tokens(bundled_lm.tokenizer, corpus.text, 153_600)
    assert len(ids) >= 153_600


@pytest.mark.slow
def test_rome_on_the_self_generated_corpus_when_no_natural_text_is_found(
        bundled_lm, countermoral_dir, tmp_path, monkeypatch, caplog):
    """The default path on a machine without the Vicuna responses (offline): ROME builds its key
    statistics from text the model generates, says so, caches both, and the edit takes."""
    import hashlib
    import logging

    from sage.editing.editor_base import EditContext, make_editor
    from sage.editing.dataset import load_countermoral
    from sage.editing.runner import evaluate

    monkeypatch.setenv("SAGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(stats, "responses_dir", lambda download=False: None)
    req = load_countermoral(countermoral_dir, "deontology", "broad", 1)[0]
    hp = {"v_steps": 12, "n_context": 2, "clamp_norm_factor": 10.0, "stats_tokens": 15360}
    before = {k: hashlib.sha256(v.numpy().tobytes()).hexdigest() for k, v in bundled_lm.model.state_dict().items()}
    with caplog.at_level(logging.WARNING, logger="sage.editing.key_statistics"):
        editor = make_editor("rome", hp, EditContext(pool=[req]))  # no --corpus
        [row] = evaluate(editor, bundled_lm, [req], batch=False)
    assert any("generates itself" in r.getMessage() for r in caplog.records)
    corpora = list((tmp_path / "cache" / "corpora").glob("*-self-15360-s0.txt"))
    assert len(corpora) == 1 and len(corpora[0].read_text()) > 15360  # characters > tokens
    [note] = list((tmp_path / "cache" / "stats").rglob("*.json"))
    assert json.loads(note.read_text())["source"] == "self-generated (15360 tokens, seed 0)"
    assert row["post_p_new"] > 20 * row["pre_p_new"]  # the edit takes with these statistics
    after = {k: hashlib.sha256(v.numpy().tobytes()).hexdigest() for k, v in bundled_lm.model.state_dict().items()}
    assert after == before  # and is undone exactly
