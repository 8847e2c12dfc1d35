"""Sequential editing: edit after edit on one model, never restored in between (`sage edit
--sequential`).

`sage edit` otherwise restores the weights after every edit (single) or makes one simultaneous
update (batch). Here the chosen frameworks' entries are edited one after another, in an order
drawn with `--order-seed` and stored in the run's settings, each edit applied on top of the
earlier ones (`EditorBase.apply_next`). The CounterMoral authors' published Table 4 was in fact
sequential (EasyEdit's `edit()` with `keep_original_weights` misspelt, so weights were never
restored).

Measured:
- after each edit, on the edited entry: the per-entry measures of a single run
  (`entry_measures`, `generation_measures`) against the entry's scores on the unedited model;
- at each checkpoint, for every edit made so far, on the model as it stands: retention
  (reliability of the earlier edits), action and relation paraphrase, the neighbourhood measures
  against the unedited baseline, and general-ability drift (`drift.py`: perplexity on held-out
  natural text, n-gram-entropy fluency). Checkpoint 0 is the unedited model's drift.

Layout under `<out>/<method>/<subset>-sequential[-<frameworks>]/` (the suffix names the
frameworks when they are not all four): `settings.json` (a rerun with other settings is
refused), `baseline.jsonl` (each entry's scores on the unedited model), `edits.jsonl` (one
record per edit), `checkpoints.jsonl` (one record per checkpoint), `saves.jsonl` (the states saved
unmeasured every `save_every` edits between checkpoints), `state/step-<n>/` (the latest saved
state: edited weights and editor state with sha256 checksums, `sequence_state.py`) and
`summary.json`.

Crash safety: every record goes through the torn-tail-safe `RecordStore`. A killed run resumes
from its latest saved state (a checkpoint's or a save's): the editor is prepared on the unedited
model (`start_sequence`), the state's checksums are verified, its weights and editor state
loaded, and the edits after it are made again; their records, already stored by the killed
sitting, are kept (the run is deterministic, so they are the same; tested with SIGKILL). After
the sequence every handle is restored in reverse order, which gives back the original weights
bit for bit. Each entry's unedited scores come from `unedited_scores` (shared with every other
method's run of the entry) and are kept in `baseline.jsonl`.
"""
from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from sage.data.records import RecordStore
from sage.editing import drift
from sage.editing.editor_base import check_sequential, make_editor
from sage.editing.dataset import FRAMEWORKS, EditRequest, load_all
from sage.editing.entry_measures import aggregate, entry_metrics, observe
from sage.editing.generation_measures import generation_metrics, observe_generation
from sage.editing.handles import WeightEditHandle
from sage.editing.runner import RunConfig, method_settings, sequential_context
from sage.editing.sequence_state import install_weights, load_state, prune, save_state
from sage.editing.target_scoring import LMScorer
from sage.editing.unedited_scores import UneditedScores, scores_from_json, scores_to_json
from sage.errors import SageInputError
from sage.models.causal_lm import load_causal_lm
from sage.outputs import write_text
from sage.progress import progress_bar
from sage.provenance import check_resume_settings, git_revision, package_versions, torch_threads

log = logging.getLogger(__name__)

CHECKPOINT_MARKS = (10, 30, 100, 300, 1000)
#: what each checkpoint record keeps per edit (all measures are aggregated in "measures")
PER_EDIT = ("reliability", "reliability_gen", "action_paraphrase", "relation_paraphrase",
            "neighbourhood_dlogp", "neighbourhood_success", "locality")


@dataclass(frozen=True)
class SequentialConfig:
    run: RunConfig  # method, frameworks (one sequence over all of them), subset, limit, model, ...
    checkpoints: tuple[int, ...] | None = None  # None: CHECKPOINT_MARKS below the length, and the end
    order_seed: int | None = None  # None: run.seed
    drift_texts: int = drift.SAMPLE_TEXTS  # held-out texts perplexity is measured on (fewer: quicker checkpoints)
    fluency_prompts: int = len(drift.FLUENCY_PROMPTS)  # the first N of drift.FLUENCY_PROMPTS
    # Between checkpoints, the state is also saved (unmeasured) every N edits, so a run killed between
    # checkpoints 100 and 300 resumes from at most N edits back (0: only at checkpoints). Not a
    # setting of the results: the records are the same whatever it is.
    save_every: int = 10

    @property
    def seed(self) -> int:
        return self.run.seed if self.order_seed is None else self.order_seed


def sequence_dir(cfg: RunConfig) -> Path:
    name = f"{cfg.subset}-sequential"
    if set(cfg.frameworks) != set(FRAMEWORKS):
        name += "-" + "+".join(f for f in FRAMEWORKS if f in cfg.frameworks)
    return Path(cfg.out) / cfg.method / name


def planned_order(entries: dict[str, Sequence[EditRequest]], seed: int) -> list[EditRequest]:
    """The entries under test of every framework (`load_all`'s mapping), shuffled with `seed`."""
    reqs = [r for fw in FRAMEWORKS if fw in entries for r in entries[fw]]
    random.Random(seed).shuffle(reqs)
    return reqs


def checkpoint_marks(given: Sequence[int] | None, n: int) -> tuple[int, ...]:
    """Checkpoints (numbers of edits made) of a sequence of `n` edits; its end is always one."""
    if given is None:
        return tuple(m for m in CHECKPOINT_MARKS if m < n) + (n,)
    marks = tuple(given)
    if not marks or any(m < 1 for m in marks) or list(marks) != sorted(set(marks)) or marks[-1] > n:
        raise SageInputError(f"--checkpoints {','.join(map(str, marks))}: expected increasing numbers of edits "
                             f"from 1 to the sequence's length, {n}")
    return marks if marks[-1] == n else marks + (n,)


def sequence_settings(scfg: SequentialConfig, sequence: Sequence[EditRequest], marks: Sequence[int]) -> dict:
    """What a sequential run's records depend on (a rerun with other settings is refused)."""
    cfg = scfg.run
    out = {**method_settings(cfg.method, cfg.seed, cfg.overrides, cfg.corpus), "subset": cfg.subset,
           "model": cfg.model, "mode": "sequential", "frameworks": [f for f in FRAMEWORKS if f in cfg.frameworks],
           "limit": cfg.limit, "order_seed": scfg.seed, "order": [r.uid for r in sequence],
           "checkpoints": list(marks),
           "drift": {"texts": scfg.drift_texts, "seed": drift.SAMPLE_SEED,
                     "prompts": list(drift.FLUENCY_PROMPTS[:scfg.fluency_prompts]), "new_tokens": drift.NEW_TOKENS}}
    if cfg.dtype != "float32":
        out["dtype"] = cfg.dtype
    return out


class _Sequence:
    """One sequential run in this process: the model, the editor and the stack of handles."""

    def __init__(self, scfg: SequentialConfig, lm: Any, editor: Any, sequence: Sequence[EditRequest], out: Path,
                 on_checkpoint: Callable[[int, Any, Any, list[EditRequest]], None] | None = None):
        self.scfg, self.cfg = scfg, scfg.run
        self.lm, self.editor, self.sequence, self.out = lm, editor, list(sequence), out
        self.on_checkpoint = on_checkpoint
        self.base = LMScorer(lm.model, lm.tokenizer)
        self.scorer = self.base  # answers for every edit so far
        self.handles: list = []
        self.made_by = git_revision()
        self.edits = RecordStore(out / "edits.jsonl", key_field="uid")
        self.points = RecordStore(out / "checkpoints.jsonl", key_field="step")
        self.saves = RecordStore(out / "saves.jsonl", key_field="step")  # unmeasured states between checkpoints
        self.pre: dict[str, dict] = {}
        self.probe = None

    # ------------------------------------------------------------------ before the first edit
    def prepare(self) -> None:
        """The editor's view of the unedited model, each entry's unedited scores, drift's baseline."""
        self.editor.start_sequence(self.lm, self.sequence)
        store = RecordStore(self.out / "baseline.jsonl", key_field="uid")
        todo = [r for r in self.sequence if r.uid not in store]
        unedited = UneditedScores(self.lm)  # another method's run of these entries computed them already
        for r in progress_bar(todo, desc="unedited scores", unit="entry", leave=False):
            scores, generation = unedited.get(r)
            store.append([{"uid": r.uid, "scores": scores_to_json(scores), "generation": generation}])
        unedited.close()
        self.pre = {uid: {"scores": scores_from_json(rec["scores"]), "generation": rec["generation"]}
                    for uid, rec in store.records.items()}
        self.probe = drift.drift_probe(self.lm, getattr(self.editor.hparams, "stats_tokens", 0),
                                       n_texts=self.scfg.drift_texts,
                                       prompts=drift.FLUENCY_PROMPTS[:self.scfg.fluency_prompts])
        zero = self.points.records.get(0)
        if zero is None:
            self.points.append([{"step": 0, "drift": self.probe.measure(self.lm, self.base),
                                 "drift_sample": self.probe.describe(), "git": self.made_by}])
        elif zero["drift_sample"]["sha256"] != self.probe.sha256:
            raise SageInputError(f"{self.out}: the held-out drift sample differs from the one this run started "
                                 "with (the sage-responses files changed); use a new --out directory")

    def resume(self) -> int:
        """Load the latest saved state (a checkpoint's or a save's between them), if any; returns the
        number of edits it holds."""
        saved = {**self.saves.records, **{s: r for s, r in self.points.records.items() if s > 0}}
        if not saved:
            return 0
        rec = saved[max(saved)]
        weights, state = load_state(self.out, rec["state"])
        self.handles.append(WeightEditHandle(install_weights(self.lm.model, weights), self.base))
        by_uid = {r.uid: r for r in self.sequence}
        handle = self.editor.load_sequence_state(self.lm, state, by_uid)
        if handle is not None:
            self.handles.append(handle)
            self.scorer = handle.scoring_model()
        log.info("resuming %s after %d edits (checkpoint %s)", self.out, rec["step"], rec["state"]["dir"])
        return rec["step"]

    # ------------------------------------------------------------------ edits and checkpoints
    def measure(self, req: EditRequest) -> dict:
        """The per-entry measures of `req` on the model as it stands, against its unedited scores."""
        pre = self.pre[req.uid]
        post = observe(self.scorer, req)
        gen = observe_generation(self.lm, self.scorer, req)
        return {**entry_metrics(pre["scores"], post), **generation_metrics(pre["generation"], gen)}

    def edit(self, step: int) -> None:
        """Make edit number `step` (1-based) and record it, measured right after."""
        req = self.sequence[step - 1]
        t0 = time.perf_counter()
        handle = self.editor.apply_next(self.lm, [req])
        seconds = time.perf_counter() - t0
        self.handles.append(handle)
        self.scorer = handle.scoring_model()
        row = {"uid": req.uid, "framework": req.framework, "step": step, **self.measure(req)}
        row.update(edit_seconds=seconds, step_seconds=time.perf_counter() - t0, git=self.made_by,
                   torch_threads=torch_threads())
        old = self.edits.records.get(req.uid)
        if old is None:
            self.edits.append([row])
        elif old.get("reliability") != row["reliability"]:  # a resumed run remakes edits it had recorded
            log.warning("%s: edit %d (%s) measured %s now, %s when first made", self.out, step, req.uid,
                        row["reliability"], old.get("reliability"))

    def checkpoint(self, step: int) -> None:
        """Measure every edit so far on the model as it stands, and save the state."""
        t0 = time.perf_counter()
        rows = []
        for i, req in enumerate(progress_bar(self.sequence[:step], desc=f"checkpoint {step}", leave=False), 1):
            rows.append({"uid": req.uid, "framework": req.framework, "step": i, **self.measure(req)})
        drift = self.probe.measure(self.lm, self.scorer)
        if self.on_checkpoint is not None:  # before the record: a kill in between redoes it on resume
            self.on_checkpoint(step, self.lm, self.scorer, self.sequence[:step])
        state = self._save_state(step)
        measures = aggregate(rows)
        self.points.append([{
            "step": step, "retention": measures["reliability"]["mean"], "measures": measures,
            "frameworks": {fw: aggregate(r for r in rows if r["framework"] == fw)
                           for fw in FRAMEWORKS if any(r["framework"] == fw for r in rows)},
            "per_edit": {r["uid"]: {k: r[k] for k in PER_EDIT if k in r} for r in rows},
            "drift": drift, "state": state, "editor": self.editor.diagnostics(), "git": self.made_by,
            "torch_threads": torch_threads(),
            "seconds": time.perf_counter() - t0}])
        prune(self.out, keep=state["dir"])

    def _save_state(self, step: int) -> dict:
        """The edited weights and the editor's state after `step` edits, on disk with their sha256."""
        params = dict(self.lm.model.named_parameters())
        names = sorted({n for h in self.handles for n in h.edited_parameters()})
        return save_state(self.out, step, {n: params[n] for n in names}, self.editor.sequence_state())

    def save(self, step: int) -> None:
        """Save the state after `step` edits without measuring (a resume point between checkpoints)."""
        state = self._save_state(step)
        self.saves.append([{"step": step, "state": state, "git": self.made_by}])
        prune(self.out, keep=state["dir"])

    def restore(self) -> None:
        """Every handle in reverse order: the original weights, bit for bit."""
        while self.handles:
            self.handles.pop().restore()
        self.scorer = self.base


def run_sequential(scfg: SequentialConfig, lm=None, on_checkpoint=None) -> dict:
    """Run (or resume) one sequential run; returns its summary. `lm`: a model already loaded in
    this process (else loaded here). `on_checkpoint(step, lm, scoring_model, edits_so_far)` runs
    at each checkpoint with every edit so far applied, before the checkpoint's record is stored
    (so a run killed during it does it again on resume); studies generate through it."""
    cfg = scfg.run
    check_sequential(cfg.method)
    if cfg.batch:
        raise SageInputError("a sequential run edits one entry after another; drop ':batch'")
    sequence = planned_order(load_all(cfg.data, cfg.frameworks, cfg.subset, cfg.limit), scfg.seed)
    marks = checkpoint_marks(scfg.checkpoints, len(sequence))
    out = sequence_dir(cfg)
    settings = sequence_settings(scfg, sequence, marks)
    check_resume_settings(out, settings)
    points = RecordStore(out / "checkpoints.jsonl", key_field="step")
    if marks[-1] in points:  # finished: summarise only, no model loads
        return summarize_sequence(cfg, settings)
    lm = lm or load_causal_lm(cfg.model, device=cfg.device, dtype=cfg.dtype, device_map=cfg.device_map)
    editor = make_editor(cfg.method, {"seed": cfg.seed, **cfg.overrides},
                         sequential_context(cfg.data, cfg.subset, cfg.device, cfg.corpus, cfg.method))
    run = _Sequence(scfg, lm, editor, sequence, out, on_checkpoint)
    try:
        run.prepare()
        done = run.resume()
        todo = [m for m in marks if m > done]
        bar = progress_bar(total=len(sequence) - done, desc=f"{cfg.method} sequential", unit="edit", leave=False)
        try:
            for step in range(done + 1, len(sequence) + 1):
                run.edit(step)
                bar.update(1)
                if todo and step == todo[0]:
                    run.checkpoint(todo.pop(0))
                elif scfg.save_every and step % scfg.save_every == 0 and step not in run.saves:
                    run.save(step)
        finally:
            bar.close()
    finally:
        run.restore()
    return summarize_sequence(cfg, settings, made_by=run.made_by)


def summarize_sequence(cfg: RunConfig, settings: dict, made_by: str | None = None) -> dict:
    """summary.json of a sequential run: its settings, the measures right after each edit
    (aggregated), each checkpoint's measures over every edit so far and drift, seconds per edit."""
    out = sequence_dir(cfg)
    edits = list(RecordStore(out / "edits.jsonl", key_field="uid").records.values())
    points = RecordStore(out / "checkpoints.jsonl", key_field="step").records
    previous = {}
    if (out / "summary.json").exists():
        try:
            previous = json.loads((out / "summary.json").read_text())
        except (OSError, ValueError):
            previous = {}
    if made_by is None and previous.get("versions"):
        versions, git = previous["versions"], previous.get("git")
    else:
        versions, git = package_versions(), made_by or git_revision()
    baseline = points.get(0, {}).get("drift")
    rows = [{"step": s, "retention": p["retention"], "measures": p["measures"], "drift": p["drift"],
             "frameworks": p.get("frameworks", {}), "editor": p.get("editor", {})}
            for s, p in sorted(points.items()) if s > 0]
    seconds = [r["edit_seconds"] for r in edits if "edit_seconds" in r]
    summary = {
        **{k: v for k, v in settings.items() if k != "order"}, "method": cfg.method, "batch": False,
        "sequential": True, "versions": versions, "git": git, "n_edits": len(edits),
        "n_expected": len(settings["order"]), "after_each_edit": aggregate(edits),
        "frameworks_after_each_edit": {fw: aggregate(r for r in edits if r["framework"] == fw)
                                       for fw in FRAMEWORKS if any(r["framework"] == fw for r in edits)},
        "drift_baseline": baseline,
        "checkpoints": rows,
        "seconds": {"edit_median": float(np.median(seconds)), "edit_mean": float(np.mean(seconds)),
                    "edits_timed": len(seconds)} if seconds else {},
    }
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "summary.json", json.dumps(summary, indent=2))
    return summary
