"""The edit-consistency study end to end on the bundled model: two entries, ROME and IKE.

Checks that texts stream to per-state record files, every probe and metric is scored, the edit
metrics ride along, wrappers are in the generation path, weights come back bit for bit, and a
rerun after a crash redoes only the missing entries.
"""
from __future__ import annotations

import json

import pandas as pd
import pytest

from sage.editing.handles import state_hashes
from sage.errors import SageInputError
from sage.studies.edit_consistency import METRICS, PROBES, StudyConfig, run_study

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def _config(countermoral_dir, out, **kw):
    return StudyConfig(
        methods=("ike", "serac-icl", "rome"), frameworks=("deontology",), limit=2, data=str(countermoral_dir),
        out=str(out), k=2, paraphrase_tokens=96, paraphrase_attempts=1, completion_tokens=8,
        answer_tokens=24, rot_tokens=16, n_boot=200,
        overrides={"rome": {"v_steps": 12, "n_context": 2, "covariance": "identity"}, "ike": {"k": 3}},
        **kw)


@pytest.fixture(scope="module")
def study(bundled_lm, countermoral_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    before = state_hashes(bundled_lm.model)
    summary = run_study(_config(countermoral_dir, out), lm=bundled_lm)
    return out, summary, before


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_records_scores_and_changes(study):
    out, summary, _ = study
    for state in ("pre", "ike", "serac-icl", "rome"):
        recs = _lines(out / "records" / f"{state}.jsonl")
        assert len(recs) == 2
        for r in recs:
            assert len(r["action"]) == len(r["relation"]) == len(r["neighbourhood"]) == 10
            assert len(r["answers"]) == len(r["rots"]) == len(r["questions"]) >= 1
            assert any(t.strip() for t in r["action"])
    scores = pd.read_csv(out / "scores.csv")
    got = set(map(tuple, scores[["state", "probe", "metric"]].drop_duplicates().to_numpy()))
    assert got == {(s, p, m) for s in ("pre", "ike", "serac-icl", "rome") for p in PROBES for m in METRICS}
    changes = pd.read_csv(out / "changes.csv")
    assert len(changes) == 3 * len(PROBES) * len(METRICS)
    # the change is post - pre of the stored per-entry scores
    wide = scores.set_index(["uid", "probe", "metric", "state"])["value"].unstack("state")
    sub = wide.xs(("action", "fluency"), level=("probe", "metric"))
    row = changes[(changes.method == "rome") & (changes.probe == "action") & (changes.metric == "fluency")]
    assert float(row["change"].iloc[0]) == pytest.approx(float((sub["rome"] - sub["pre"]).mean()))
    assert summary["edit_metrics"]["rome"]["reliability"]["n"] == 2
    text = (out / "summary.md").read_text()
    assert "| rome |" in text and "Probe: rots" in text
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["provenance"]["git"] and cfg["provenance"]["versions"]


def test_weights_restored_and_edit_took(study, bundled_lm):
    out, summary, before = study
    assert state_hashes(bundled_lm.model) == before
    rome = _lines(out / "records" / "rome.jsonl")
    assert all(r["edit"]["post_p_new"] > r["edit"]["pre_p_new"] for r in rome)
    pre = {r["uid"]: r for r in _lines(out / "records" / "pre.jsonl")}
    assert any(r["action"] != pre[r["uid"]]["action"] for r in rome)  # the edited model's own text


def test_wrapper_is_in_the_generation_path(study, bundled_lm, countermoral_dir):
    """IKE's completions are the base model's greedy completions of the IKE-conditioned prompts,
    and the wrappers' (IKE, SERAC) edited completions are not the unedited ones."""
    from sage.editing.editor_base import EditContext, make_editor
    from sage.editing.dataset import load_countermoral
    from sage.generation.hf import TransformersBackend
    from sage.studies.probes import complete

    out, _, _ = study
    pool = load_countermoral(countermoral_dir, "deontology", "broad")
    req = pool[0]
    handle = make_editor("ike", {"k": 3}, EditContext(pool=pool)).apply(bundled_lm, [req])
    scorer = handle.scoring_model()
    prompts = list(req.action_paraphrases[:2])
    assert scorer.condition_prompts(prompts) != prompts
    backend = TransformersBackend.from_loaded(bundled_lm, "check")
    expect = complete(backend, scorer, prompts, 8, 0)
    ike = {r["uid"]: r for r in _lines(out / "records" / "ike.jsonl")}
    assert ike[req.uid]["action"][:2] == expect
    plain = complete(backend, type("Identity", (), {"condition_prompts": staticmethod(list)})(), prompts, 8, 0)
    pre = {r["uid"]: r for r in _lines(out / "records" / "pre.jsonl")}
    assert pre[req.uid]["action"][:2] == plain
    for method in ("ike", "serac-icl"):
        edited = {r["uid"]: r for r in _lines(out / "records" / f"{method}.jsonl")}
        for uid, rec in edited.items():
            changed = sum(a != b for kind in ("action", "relation") for a, b in zip(rec[kind], pre[uid][kind]))
            assert changed >= 5, f"{method} left {uid}'s completions (nearly) unedited"


def test_grace_is_refused_before_any_generation_or_edit(countermoral_dir, tmp_path):
    out = tmp_path / "grace"
    with pytest.raises(SageInputError, match="'grace': generation through its scoring wrapper"):
        run_study(StudyConfig(methods=("rome", "grace"), frameworks=("deontology",), limit=1,
                              data=str(countermoral_dir), out=str(out)))
    assert not out.exists()  # refused while checking the configuration: nothing generated or edited


def test_resume_redoes_only_missing_entries(study, bundled_lm, countermoral_dir):
    out, _, _ = study
    path = out / "records" / "rome.jsonl"
    first, second = path.read_text().splitlines()
    path.write_text(first + "\n" + second[: len(second) // 2])  # a crash mid-write
    pre_before = (out / "records" / "pre.jsonl").read_text()
    run_study(_config(countermoral_dir, out), lm=bundled_lm)
    recs = _lines(path)
    assert [r["uid"] for r in recs].count(json.loads(first)["uid"]) == 1 and len(recs) == 2
    assert (out / "records" / "pre.jsonl").read_text() == pre_before  # nothing redone there
    # other ROME settings into the same directory: refused, not mixed with the stored texts
    changed = _config(countermoral_dir, out)
    changed.overrides["rome"] = {**changed.overrides["rome"], "v_steps": 13}
    with pytest.raises(SageInputError, match="hparams.v_steps 12 -> 13"):
        run_study(changed, lm=bundled_lm)
    assert _lines(path) == recs


def test_cli_bad_hparams_is_one_line(tmp_path):
    from tests.fixtures_cli import assert_clean_error, run_sage

    bad = tmp_path / "h.json"
    bad.write_text("{not json")
    proc = run_sage("study", "edit-consistency", "--hparams", bad, "--out", tmp_path / "o")
    assert_clean_error(proc, "malformed JSON", "h.json")
    proc = run_sage("study", "edit-consistency", "--method", "rome:fast", "--out", tmp_path / "o")
    assert_clean_error(proc, "rome:fast")
