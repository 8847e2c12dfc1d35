"""`sage study edit-consistency --sequential`: consistency on moral questions as edits accumulate.

For each method, one sequence of edits over the chosen entries (`sage.editing.sequential`, its
records under `out/sequential/`, resumable like every sequential run). At each checkpoint, with
every edit so far applied, the model's free text (`probes.py`: greedy completions of the
paraphrase and neighbourhood prompts, answers to paraphrased open questions) is collected for
(a) **edited**: the actions edited so far, and (b) **control**: a fixed set of unrelated moral
questions, the first `controls` entries of each chosen framework in the *other* CounterMoral
subset, never edited. Rules of Thumb are written by the unedited model once the sequence is undone
(as in the single-edit study, so RoT changes reflect the answers only). SGE and the baselines are
computed per (checkpoint, entry, probe), and the change against the unedited model's texts of the
same entries is reported with a paired bootstrap CI over entries, per method, checkpoint and group.

Layout under `out/`: `config.json`; `records/pre.jsonl` (the unedited model, edited and control
entries), `records/<method>-sequential.jsonl` (one record per checkpoint and entry, key
`<step>:<uid>`) and `.rots.jsonl` beside it; `sequential/` (the editing runs); `scores.csv`,
`changes.csv` (method, step, group, probe, metric, pre, post, change, CI), `summary.json`,
`summary.md` and `sge_vs_edits.png`.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

import pandas as pd

from sage.data.files import write_table
from sage.data.records import RecordStore
from sage.editing.dataset import SUBSETS, EditRequest, load_countermoral
from sage.editing.runner import RunConfig
from sage.editing.sequential import SequentialConfig, run_sequential
from sage.errors import SageInputError
from sage.outputs import write_text, write_whole
from sage.progress import progress_bar
from sage.provenance import check_resume_settings
from sage.studies.edit_consistency import (
    METRICS,
    StudyConfig,
    _Study,
    paired_changes,
    score_states,
    state_name,
    write_config,
)

log = logging.getLogger(__name__)
GROUPS = ("edited", "control")
SEQUENTIAL_METHODS = ("rome", "lora", "ike", "memit")  # the study's defaults, each edited one after another


@dataclass(frozen=True)
class SequentialStudyConfig:
    study: StudyConfig  # methods (single mode), entries, generation settings, seed, out, ...
    checkpoints: tuple[int, ...] | None = None  # None: the sequential run's defaults
    controls: int = 5  # unrelated entries per framework, from the other subset
    drift_texts: int = SequentialConfig.drift_texts  # held-out texts of the drift perplexity

    def __post_init__(self):
        if any(":" in m for m in self.study.methods):
            raise SageInputError("a sequential study edits one entry after another; drop ':batch'")
        if self.controls < 1:
            raise SageInputError("controls must be >= 1 (the unrelated questions the change is compared on)")


def control_entries(cfg: StudyConfig, n: int) -> list[EditRequest]:
    """The first `n` entries of each chosen framework in the other subset: never edited."""
    other = next(s for s in SUBSETS if s != cfg.subset)
    return [r for fw in cfg.frameworks for r in load_countermoral(cfg.data, fw, other, n)]


class _SequentialStudy:
    def __init__(self, scfg: SequentialStudyConfig, lm=None):
        self.scfg, self.cfg = scfg, scfg.study
        self.study = _Study(self.cfg, lm)
        self.edited = list(self.study.entries)
        self.controls = control_entries(self.cfg, scfg.controls)
        self.study.entries = self.edited + self.controls  # open questions and pre-edit texts for both groups
        self.kind = {**{r.uid: "edited" for r in self.edited}, **{r.uid: "control" for r in self.controls}}
        self.out = Path(self.cfg.out)

    def pre(self, open_qs) -> RecordStore:
        check_resume_settings(self.out / "records", self.study.text_settings(), name="pre.settings.json")
        store = RecordStore(self.out / "records" / "pre.jsonl")
        todo = [r for r in self.study.entries if r.uid not in store]
        for r in progress_bar(todo, desc="before edit", unit="entry", leave=False):
            store.append(self.study.pre_records([r], open_qs))
        return store

    def method(self, method: str, open_qs) -> tuple[RecordStore, RecordStore, dict]:
        cfg = self.cfg
        run = RunConfig(method=method, frameworks=list(cfg.frameworks), subset=cfg.subset, model=cfg.model,
                        out=self.out / "sequential", data=cfg.data, limit=cfg.limit,
                        overrides=cfg.overrides.get(method, {}), corpus=cfg.corpus, device=cfg.device,
                        seed=cfg.seed, dtype=cfg.dtype, device_map=cfg.device_map)
        check_resume_settings(self.out / "records", {**self.study.text_settings(), "method": method,
                                                    "controls": [r.uid for r in self.controls]},
                              name=f"{state_name(method)}-sequential.settings.json")
        store = RecordStore(self.out / "records" / f"{state_name(method)}-sequential.jsonl")

        def at_checkpoint(step, lm, scorer, done: list[EditRequest]) -> None:
            todo = [r for r in done + self.controls if f"{step}:{r.uid}" not in store]
            for r in progress_bar(todo, desc=f"{method} texts after {step} edits", unit="entry", leave=False):
                texts = self.study._generate_edited(method, scorer, [r], open_qs)
                store.append([{"key": f"{step}:{r.uid}", "step": step, "uid": r.uid, "group": self.kind[r.uid],
                               **texts[r.uid]}])

        summary = run_sequential(SequentialConfig(run, checkpoints=self.scfg.checkpoints,
                                                  drift_texts=self.scfg.drift_texts),
                                 lm=self.study.lm, on_checkpoint=at_checkpoint)
        # the sequence is undone: RoTs by the unedited model, as in the single-edit study
        rots = RecordStore(self.out / "records" / f"{state_name(method)}-sequential.rots.jsonl")
        todo = [rec for key, rec in store.records.items() if key not in rots]
        for rec in progress_bar(todo, desc=f"{method} RoTs", unit="entry", leave=False):
            texts = {rec["uid"]: {k: rec[k] for k in ("questions", "answers")}}
            self.study.add_rots(texts)
            rots.append([{"key": rec["key"], "rots": texts[rec["uid"]]["rots"]}])
        return store, rots, summary


def _state(method: str, step: int) -> str:
    return f"{state_name(method)}@{step}"


def _score(pre: RecordStore, texts: dict[str, tuple[RecordStore, RecordStore]], seed: int) -> pd.DataFrame:
    """Long scores of the unedited state and of every (method, checkpoint) state."""
    states = {"pre": pre}
    uids: dict[str, list[str]] = {"pre": list(pre.records)}
    for method, (store, rots) in texts.items():
        for key, rec in store.records.items():
            name = _state(method, rec["step"])
            states.setdefault(name, SimpleNamespace(records={}))
            states[name].records[rec["uid"]] = {**rec, "rots": rots.records[key]["rots"]}
            uids.setdefault(name, []).append(rec["uid"])
    return score_states(states, uids, seed)


def sequential_changes(scores: pd.DataFrame, groups: dict[str, str], methods: Sequence[str],
                       steps: dict[str, Sequence[int]], n_boot: int, seed: int) -> pd.DataFrame:
    """Per method, checkpoint, group (edited / control), probe and metric: the paired change against
    the unedited model's texts of the same entries, with a bootstrap CI over entries."""
    parts = []
    for group in GROUPS:
        sub = scores[scores["uid"].map(groups) == group]
        for method in methods:
            for step in steps[method]:
                state = _state(method, step)
                present = set(sub.loc[sub["state"] == state, "uid"])
                cut = sub[sub["uid"].isin(present) & sub["state"].isin(["pre", state])]
                if cut.empty:
                    continue
                ch = paired_changes(cut, [state], n_boot, seed)
                parts.append(ch.assign(method=method, step=step, group=group))
    cols = ["method", "step", "group", "probe", "metric", "pre", "post", "change", "ci_low", "ci_high", "n"]
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


def _markdown(changes: pd.DataFrame, summaries: dict, scfg: SequentialStudyConfig, n: dict) -> str:
    cfg = scfg.study
    lines = ["# Consistency as edits accumulate (sequential edit-consistency study)", "",
             f"Model `{cfg.model}`, {n['edited']} CounterMoral {cfg.subset} entries edited one after another "
             f"({', '.join(cfg.frameworks)}), {n['control']} unrelated control entries from the other subset, "
             f"seed {cfg.seed}. Change = at checkpoint - unedited, mean over entries with a 95% paired bootstrap CI "
             f"({cfg.n_boot} resamples); edited: the actions edited so far; control: never edited.", ""]
    for method, s in summaries.items():
        lines += [f"## {method}", "", "| Edits | retention | perplexity | group | probe | " + " | ".join(METRICS) + " |",
                  "|---:|---:|---:|---|---|" + "---:|" * len(METRICS)]
        by_step = {c["step"]: c for c in s["checkpoints"]}
        sub = changes[changes["method"] == method]
        for (step, group, probe), g in sub.groupby(["step", "group", "probe"], sort=True):
            c = by_step.get(step, {})
            cells = []
            for metric in METRICS:
                r = g[g["metric"] == metric]
                cells.append("n/a" if r.empty or not r["n"].iloc[0] else
                             f"{r['change'].iloc[0]:+.3f} [{r['ci_low'].iloc[0]:+.3f}, {r['ci_high'].iloc[0]:+.3f}]")
            ppl = c.get("drift", {}).get("perplexity")
            lines.append(f"| {step} | {c.get('retention', float('nan')):.3f} | "
                         f"{'n/a' if ppl is None else f'{ppl:.2f}'} | {group} | {probe} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


def plot(changes: pd.DataFrame, path: Path, probe: str = "answers") -> Path | None:
    """SGE change against the number of edits, per method and group, for one probe."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sub = changes[(changes["metric"] == "sge") & (changes["probe"] == probe)]
    if sub.empty:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for (method, group), g in sub.groupby(["method", "group"]):
        g = g.sort_values("step")
        ax.errorbar(g["step"], g["change"], yerr=[g["change"] - g["ci_low"], g["ci_high"] - g["change"]],
                    marker="o" if group == "edited" else "s", linestyle="-" if group == "edited" else "--",
                    capsize=3, label=f"{method} ({group})")
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set(xlabel="edits made", ylabel=f"SGE change vs unedited ({probe})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    write_whole(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    return path


def run_sequential_study(scfg: SequentialStudyConfig, lm=None) -> dict:
    cfg = scfg.study
    seq = _SequentialStudy(scfg, lm)
    out = seq.out
    prov = write_config(out, scfg, cfg.seed)
    open_qs = seq.study.open_paraphrases()
    pre = seq.pre(open_qs)
    texts, summaries = {}, {}
    for method in cfg.methods:
        store, rots, summaries[method] = seq.method(method, open_qs)
        texts[method] = (store, rots)
    scores = _score(pre, texts, cfg.seed)
    write_table(scores, out / "scores.csv")
    steps = {m: sorted({r["step"] for r in texts[m][0].records.values()}) for m in cfg.methods}
    changes = sequential_changes(scores, seq.kind, cfg.methods, steps, cfg.n_boot, cfg.seed)
    write_table(changes, out / "changes.csv")
    n = {g: sum(1 for k in seq.kind.values() if k == g) for g in GROUPS}
    slim = {m: {"n_edits": s["n_edits"], "checkpoints": [{k: c[k] for k in ("step", "retention", "drift")}
                                                         for c in s["checkpoints"]]} for m, s in summaries.items()}
    summary = {"config": asdict(scfg), "n_entries": n, "sequences": slim,
               "changes": changes.to_dict(orient="records"), "provenance": prov}
    write_text(out / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    write_text(out / "summary.md", _markdown(changes, summaries, scfg, n))
    plot(changes, out / "sge_vs_edits.png")
    return summary

