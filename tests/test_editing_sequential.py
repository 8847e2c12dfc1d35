"""Sequential editing (issue 32 §1) on the bundled model: a sequence equals the same edits made by
hand, checkpoints read the model after every edit so far, restore is bit-exact, GRACE's codebook and
the AlphaEdit projection grow with the edits, and a SIGKILLed run resumes to the same records."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sage.editing.editor_base import EditContext, check_sequential, make_editor
from sage.editing.dataset import load_all
from sage.editing.entry_measures import entry_metrics, observe
from sage.editing.handles import state_hashes
from sage.editing.runner import RunConfig
from sage.editing.sequential import SequentialConfig, checkpoint_marks, planned_order, run_sequential, sequence_dir
from sage.editing.target_scoring import LMScorer
from sage.errors import SageInputError

REPO = Path(__file__).resolve().parents[1]
FAST = {
    "rome": {"v_steps": 12, "n_context": 2, "clamp_norm_factor": 10.0, "stats_tokens": 15360},
    "alphaedit": {"v_steps": 12, "n_context": 2, "layers": [3, 4], "clamp_norm_factor": 10.0, "stats_tokens": 15360},
    "grace": {"steps": 10},
}
TIMING = {"edit_seconds", "step_seconds", "seconds", "git"}


def test_checkpoint_marks():
    assert checkpoint_marks(None, 250) == (10, 30, 100, 250)
    assert checkpoint_marks(None, 10) == (10,)
    assert checkpoint_marks((2, 5), 7) == (2, 5, 7)  # the end is always a checkpoint
    for bad in [(), (0, 3), (3, 2), (2, 2), (8,)]:
        with pytest.raises(SageInputError, match="--checkpoints"):
            checkpoint_marks(bad, 7)


def test_a_method_that_cannot_edit_sequentially_is_refused_in_one_line(monkeypatch):
    from sage.editing.editor_base import EDITORS

    check_sequential("rome")
    monkeypatch.setattr(EDITORS.get("ike"), "supports_sequential", False)
    with pytest.raises(SageInputError, match="'ike' cannot edit sequentially"):
        check_sequential("ike")


def test_exclude_keys_against_numpy():
    """P' = P - QQ^T (Q: orthonormal basis of P K): a projector inside range(P) with K^T P' = 0."""
    rng = np.random.default_rng(0)
    from sage.editing import solvers

    U = np.linalg.qr(rng.normal(size=(12, 12)))[0][:, :7]
    P = U @ U.T
    K = rng.normal(size=(12, 3))
    got = solvers.exclude_keys(torch.tensor(P), torch.tensor(K)).numpy()
    Q = np.linalg.svd(P @ K, full_matrices=False)[0]
    np.testing.assert_allclose(got, P - Q @ Q.T, atol=1e-12)
    np.testing.assert_allclose(K.T @ got, 0, atol=1e-12)
    np.testing.assert_allclose(got @ got, got, atol=1e-12)
    np.testing.assert_allclose(P @ got, got, atol=1e-12)
    assert round(np.trace(got)) == 4


@pytest.fixture(scope="module")
def corpus_file(countermoral_dir, tmp_path_factory):
    texts = []
    for fw in ("care_ethics", "deontology", "utilitarianism", "virtue_ethics"):
        for r in load_all(countermoral_dir, [fw], "specific")[fw]:
            texts += [f"{r.prompt} {r.target_true}.", *r.action_paraphrases, *r.neighbourhood]
    path = tmp_path_factory.mktemp("corpus") / "countermoral.txt"
    path.write_text("\n".join(texts))  # same text every run: the statistics cache is reused
    return str(path)


def _config(method, out, data, corpus, checkpoints, limit=3):
    run = RunConfig(method=method, frameworks=["care_ethics"], subset="specific", out=Path(out), data=str(data),
                    limit=limit, overrides=FAST[method], corpus=corpus)
    return SequentialConfig(run, checkpoints=checkpoints, drift_texts=8, fluency_prompts=2)


def _records(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]




@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_rome_sequence_equals_the_edits_made_by_hand(bundled_lm, countermoral_dir, corpus_file, tmp_path):
    scfg = _config("rome", tmp_path, countermoral_dir, corpus_file, (1, 3))
    before = state_hashes(bundled_lm.model)
    summary = run_sequential(scfg, lm=bundled_lm)
    assert state_hashes(bundled_lm.model) == before  # every handle restored: bit for bit
    assert summary["n_edits"] == 3 and [c["step"] for c in summary["checkpoints"]] == [1, 3]
    out = sequence_dir(scfg.run)
    points = {json.loads(x)["step"]: json.loads(x) for x in (out / "checkpoints.jsonl").read_text().splitlines()}

    order = planned_order(load_all(countermoral_dir, ["care_ethics"], "specific", 3), seed=0)
    assert [r.uid for r in order] == json.loads((out / "settings.json").read_text())["order"]
    base = LMScorer(bundled_lm.model, bundled_lm.tokenizer)
    pre = {r.uid: observe(base, r) for r in order}
    editor = make_editor("rome", {"seed": 0, **FAST["rome"]}, EditContext(corpus=corpus_file))
    handles, after_first = [], None
    try:
        for r in order:  # by hand: each edit on the weights the last one left
            handles.append(editor.apply(bundled_lm, [r]))
            if after_first is None:
                after_first = entry_metrics(pre[order[0].uid], observe(base, order[0]))
        from safetensors.torch import load_file

        saved = load_file(str(out / points[3]["state"]["dir"] / "weights.safetensors"))
        params = dict(bundled_lm.model.named_parameters())
        assert saved and all(torch.equal(params[n], t) for n, t in saved.items())
        # checkpoint 3 measured every edit on the model after all three
        for r in order:
            now = entry_metrics(pre[r.uid], observe(base, r))
            for key in ("reliability", "relation_paraphrase", "neighbourhood_dlogp"):
                assert points[3]["per_edit"][r.uid][key] == pytest.approx(now[key], abs=1e-9)
        first = points[3]["per_edit"][order[0].uid]["neighbourhood_dlogp"]
        assert first != pytest.approx(after_first["neighbourhood_dlogp"], abs=1e-6)  # later edits moved it
        assert points[1]["per_edit"][order[0].uid]["neighbourhood_dlogp"] == pytest.approx(
            after_first["neighbourhood_dlogp"], abs=1e-9)
    finally:
        for h in reversed(handles):
            h.restore()
    assert state_hashes(bundled_lm.model) == before
    assert points[3]["drift"]["perplexity"] > 1 and points[0]["drift"]["tokens"] == points[3]["drift"]["tokens"]


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_grace_codebook_holds_one_key_per_edit(bundled_lm, countermoral_dir):
    reqs = load_all(countermoral_dir, ["care_ethics"], "specific", 3)["care_ethics"]
    module_hooks = lambda: sum(len(m._forward_hooks) for m in bundled_lm.model.modules())  # noqa: E731
    hooks, before = module_hooks(), state_hashes(bundled_lm.model)
    editor = make_editor("grace", FAST["grace"])
    editor.start_sequence(bundled_lm, reqs)
    handles = []
    for n, r in enumerate(reqs, 1):
        handles.append(editor.apply_next(bundled_lm, [r]))
        assert len(editor._adapter.keys) == n and editor.sequence_state()["keys"].shape[0] == n
    assert module_hooks() == hooks + 1  # one adapter for the whole sequence
    handles.pop().restore()
    assert len(editor._adapter.keys) == 2
    while handles:
        handles.pop().restore()
    assert editor._adapter is None and module_hooks() == hooks and state_hashes(bundled_lm.model) == before


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_alphaedit_projection_excludes_the_earlier_edits_keys(bundled_lm, countermoral_dir, corpus_file):
    reqs = load_all(countermoral_dir, ["care_ethics"], "specific", 2)["care_ethics"]
    editor = make_editor("alphaedit", {"seed": 0, **FAST["alphaedit"]}, EditContext(corpus=corpus_file))
    editor.start_sequence(bundled_lm, reqs)
    profile, layers = editor.locate(bundled_lm.model, FAST["alphaedit"]["layers"])
    names = [f"{profile.mlp_out.format(layer)}.weight" for layer in layers]
    params = dict(bundled_lm.model.named_parameters())
    w0 = {n: params[n].detach().double().clone() for n in names}
    first = editor.apply_next(bundled_lm, [reqs[0]])
    try:
        w1 = {n: params[n].detach().double().clone() for n in names}
        k1 = {layer: editor._earlier[layer][0] for layer in layers}
        second = editor.apply_next(bundled_lm, [reqs[1]])
        try:
            assert all(len(editor._earlier[layer]) == 2 for layer in layers)
            for layer, name in zip(layers, names):
                P = editor.projector(layer)  # the next edit's: excludes both edits' keys
                keys = torch.cat(editor._earlier[layer], dim=1)
                assert float((keys.T @ P).abs().max()) < 1e-8
                d1, d2 = w1[name] - w0[name], params[name].detach().double() - w1[name]
                k2 = editor._earlier[layer][1]
                # the second update leaves the first edit's keys' outputs (almost: float32 weights) alone
                assert (d2 @ k1[layer]).norm() < 1e-3 * (d2 @ k2).norm()
                assert (d1 @ k1[layer]).norm() > 1e2 * (d2 @ k1[layer]).norm()
            assert "sequence_null_dim" in editor.diagnostics()
        finally:
            second.restore()
        assert all(len(editor._earlier[layer]) == 1 for layer in layers)  # restore forgets its keys
    finally:
        first.restore()
    assert all(torch.equal(params[n].detach().double(), w0[n]) for n in names)


DRIVER = r"""
import logging, os, signal, sys, json
from pathlib import Path
import torch
logging.basicConfig(level=logging.INFO)  # the resume line is read by the test
torch.set_num_threads(1)
from sage.editing import sequential
from sage.editing.runner import RunConfig
from sage.editing.sequential import SequentialConfig, run_sequential

cfg = json.loads(sys.argv[1])
kill_after = int(sys.argv[2])
if kill_after:
    edit = sequential._Sequence.edit
    def killing_edit(self, step):
        edit(self, step)
        if step == kill_after:  # the edit's record is stored, its checkpoint not yet made
            os.kill(os.getpid(), signal.SIGKILL)
    sequential._Sequence.edit = killing_edit
run = RunConfig(method="alphaedit", frameworks=["care_ethics"], subset="specific", out=Path(cfg["out"]),
                data=cfg["data"], limit=3, overrides=cfg["overrides"], corpus=cfg["corpus"])
# checkpoints after edits 1 and 3; between them, edit 2's state is saved unmeasured (save_every=2)
run_sequential(SequentialConfig(run, checkpoints=(1, 3), drift_texts=4, fluency_prompts=1, save_every=2))
"""


@pytest.mark.slow
def test_sigkilled_sequence_resumes_to_the_records_of_an_uninterrupted_one(countermoral_dir, corpus_file, tmp_path):
    def run(out, kill_after=0):
        cfg = {"out": str(out), "data": str(countermoral_dir), "overrides": FAST["alphaedit"], "corpus": corpus_file}
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        return subprocess.run([sys.executable, "-c", DRIVER, json.dumps(cfg), str(kill_after)], env=env,
                              capture_output=True, text=True)

    whole = run(tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr[-2000:]
    killed = run(tmp_path / "killed", kill_after=3)
    assert killed.returncode == -signal.SIGKILL
    d_whole = tmp_path / "whole" / "alphaedit" / "specific-sequential-care_ethics"
    d_killed = tmp_path / "killed" / "alphaedit" / "specific-sequential-care_ethics"
    assert len(_records(d_killed / "edits.jsonl")) == 3 and len(_records(d_killed / "checkpoints.jsonl")) == 2
    assert [r["step"] for r in _records(d_killed / "saves.jsonl")] == [2]
    assert sorted(p.name for p in (d_killed / "state").iterdir()) == ["step-2"]  # the save, not checkpoint 1
    resumed = run(tmp_path / "killed")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "after 2 edits" in resumed.stderr  # from the save between the checkpoints
    for name in ("baseline.jsonl", "edits.jsonl", "checkpoints.jsonl", "saves.jsonl"):
        assert _records(d_killed / name) == _records(d_whole / name), name  # checksums of the states included
    from safetensors.torch import load_file

    last = _records(d_killed / "checkpoints.jsonl")[-1]  # the end: AlphaEdit's keys of all edits, both layers
    assert sorted(load_file(str(d_killed / last["state"]["dir"] / "editor.safetensors"))) == [
        "keys.3.0", "keys.3.1", "keys.3.2", "keys.4.0", "keys.4.1", "keys.4.2"]


EVERY = {
    "ft-l": {"steps": 5, "lr": 2e-2, "norm_constraint": 2e-2, "layer": 4},
    "ft-m": {"steps": 5, "lr": 2e-2, "norm_constraint": 2e-2},
    "lora": {"steps": 5, "lr": 2e-2, "layers": [3, 4]},
    "memit": {"v_steps": 8, "n_context": 2, "layers": [3, 4], "clamp_norm_factor": 10.0, "stats_tokens": 15360},
    "ike": {"k": 2},
    "serac-icl": {},
    "serac": {"cls_epochs": 1, "cls_max_pairs": 200, "cf_steps": 5, "cf_layers": 2},
}


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("method", sorted(EVERY))
def test_every_method_edits_on_top_of_the_last_and_undoes_each_edit_exactly(
        method, bundled_lm, countermoral_dir, corpus_file, tmp_path, monkeypatch):
    """Two edits one after another: the second answers for both (weights moved again, or the memory
    holds both), restoring it gives back the state after the first bit for bit, and restoring the
    first the original weights."""
    from sage.editing.runner import sequential_context

    if method == "serac":  # its trained parts are cached: keep the test's out of the user cache
        monkeypatch.setenv("SAGE_CACHE_DIR", str(tmp_path))
    reqs = load_all(countermoral_dir, ["deontology"], "specific", 2)["deontology"]
    context = sequential_context(countermoral_dir, "specific", corpus=corpus_file, method=method)
    assert not {r.uid for r in [*context.pool, *context.held_out]} & {r.uid for r in reqs}  # the other subset
    if context.pool or context.held_out:  # a short training and retrieval: a few entries of one framework
        context.pool = [r for r in context.pool if r.framework == "care_ethics"][:8]
        context.held_out = [r for r in context.held_out if r.framework == "care_ethics"][:6]
    editor = make_editor(method, {"seed": 0, **EVERY[method]}, context)
    assert editor.supports_sequential
    before = state_hashes(bundled_lm.model)
    editor.start_sequence(bundled_lm, reqs)
    first = editor.apply_next(bundled_lm, [reqs[0]])
    after_first = state_hashes(bundled_lm.model)
    second = editor.apply_next(bundled_lm, [reqs[1]])
    try:
        if first.edited_parameters():  # a weight method: the second edit wrote again
            assert state_hashes(bundled_lm.model) != after_first
        else:  # a memory: both edits are in it
            assert len(editor._memory) == 2 and editor.sequence_state()["memory"] == [r.uid for r in reqs]
        scorer = second.scoring_model()
        scores = scorer.score([reqs[0].prompt, reqs[1].prompt], [reqs[0].target_new, reqs[1].target_new])
        assert all(s.logprob > -50 for s in scores)
        if method == "ike":  # the earlier edit is a demonstration of the later one's context
            assert "New Fact: " + reqs[0].prompt in scorer.condition_prompts(["x"])[0]
    finally:
        second.restore()
    assert state_hashes(bundled_lm.model) == after_first
    first.restore()
    assert state_hashes(bundled_lm.model) == before
