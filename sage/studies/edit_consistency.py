"""`sage study edit-consistency`: how an edit changes a model's consistency on the edited judgment.

For each chosen CounterMoral entry the model's free text is collected before the edit (once) and
after each method's edit (see `probes.py`); then SGE and the baselines (BLEU, ROUGE-L, BERTScore)
are computed per entry, probe and state, and the change (post - pre) is reported per method with a
paired bootstrap CI over entries, next to n-gram-entropy fluency and the CounterMoral edit metrics.

Layout under `out/`: `config.json`; `records/pre.jsonl` and `records/<state>.jsonl` (one line per
entry as it finishes; a rerun skips finished entries, and refuses to mix in texts made with other
settings: `records/<state>.settings.json`); `open_questions/` (paraphrase records);
`scores.csv` (long: state, uid, probe, metric, value), `changes.csv`, `summary.json`, `summary.md`.
A method named `memit:batch` applies all chosen entries in one edit (methods that batch).
"""
from __future__ import annotations

import functools
import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from sage.data.files import write_table
from sage.data.records import RecordStore
from sage.editing.editor_base import EDITORS, check_batch_mode
from sage.editing.dataset import FRAMEWORKS, EditRequest, load_countermoral
from sage.editing.entry_measures import aggregate
from sage.editing.runner import evaluate, method_settings
from sage.editing.sweep import EditorCache, pending_groups
from sage.editing.target_scoring import LMScorer
from sage.errors import SageInputError
from sage.executors import make_executor, run_units
from sage.generation.cache import CachedBackend, GenerationCache
from sage.generation.hf import TransformersBackend
from sage.generation.model_specs import resolve_model
from sage.metrics.fluency import mean_ngram_entropy
from sage.metrics.stats import bootstrap_mean_ci
from sage.models.causal_lm import load_causal_lm
from sage.outputs import write_text
from sage.paraphrase.parascore import DEFAULT_THRESHOLD, ParaScorer
from sage.provenance import check_resume_settings, provenance
from sage.studies import probes

log = logging.getLogger(__name__)
METRICS = ("sge", "bleu", "rouge_l", "bertscore", "fluency")
PROBES = probes.COMPLETION_PROBES + probes.OPEN_PROBES


@dataclass(frozen=True)
class StudyConfig:
    methods: tuple[str, ...] = ("rome", "lora", "ike", "memit:batch")
    frameworks: tuple[str, ...] = FRAMEWORKS
    subset: str = "broad"
    limit: int | None = None  # entries per framework
    model: str = "smollm2-135m"
    out: str = "results/edit-consistency"
    data: str | None = None
    k: int = 5  # paraphrases of the open question
    min_parascore: float | None = None  # default: the paraphrase stage's 0.8
    question_template: str = probes.DEFAULT_QUESTION_TEMPLATE
    paraphrase_tokens: int = 192
    paraphrase_attempts: int = 3
    completion_tokens: int = 24
    answer_tokens: int = 64
    rot_tokens: int = 32
    overrides: dict[str, dict] = field(default_factory=dict)  # per method name
    corpus: str | None = None
    device: str = "cpu"
    seed: int = 0
    n_boot: int = 2000
    dtype: str = "float32"  # the weights'; editing numerics stay in float32/float64
    device_map: str | None = None

    def __post_init__(self):
        if not self.methods:
            raise SageInputError("no methods given; pass --method (e.g. rome, lora, ike, memit:batch)")
        for m in self.methods:
            name, _, mode = m.partition(":")
            if name not in EDITORS:
                raise SageInputError(f"unknown editing method {name!r} in {m!r}; choose from "
                                     f"{', '.join(EDITORS.names())}")
            if mode not in ("", "batch"):
                raise SageInputError(f"{m!r}: the only method mode is ':batch' (e.g. memit:batch)")
            if not EDITORS.get(name).can_generate:  # refused before any generation or edit is spent
                raise SageInputError(f"method {name!r}: generation through its scoring wrapper is not "
                                     "implemented; leave it out of the study")
        names = {m.partition(":")[0] for m in self.methods}
        for name in self.overrides:
            if name not in names:
                raise SageInputError(f"hyperparameter overrides for {name!r}, which is not among the "
                                     f"methods ({', '.join(self.methods)})")
        if "{action}" not in self.question_template:
            raise SageInputError("question_template must contain {action}")
        for name in ("k", "completion_tokens", "answer_tokens", "rot_tokens", "paraphrase_tokens",
                     "paraphrase_attempts"):
            if getattr(self, name) < 1:
                raise SageInputError(f"{name} must be >= 1")


def state_name(method: str) -> str:
    return method.replace(":", "-")


class _Study:
    def __init__(self, cfg: StudyConfig, lm=None):
        self.cfg = cfg
        self.out = Path(cfg.out)
        self.entries = [r for fw in cfg.frameworks
                        for r in load_countermoral(cfg.data, fw, cfg.subset, cfg.limit)]
        self.lm = lm or load_causal_lm(cfg.model, device=cfg.device, dtype=cfg.dtype,
                                        device_map=cfg.device_map)
        self.spec = resolve_model(cfg.model)
        self.fmt = self.spec.format
        # The unedited model: cached generation (paraphrases, pre-edit text, every RoT).
        self.base = CachedBackend(TransformersBackend.from_loaded(self.lm, self.spec.model_id),
                                  GenerationCache())
        self.live = TransformersBackend.from_loaded(self.lm, f"{self.spec.model_id}+edited")

    # ------------------------------------------------------------------ open questions
    def open_paraphrases(self) -> dict[str, list[str]]:
        from sage.pipeline.paraphrase_stage import (
            ParaphraseConfig,
            paraphrase_table,
            run_paraphrase_stage,
        )

        cfg = self.cfg
        questions = pd.DataFrame({"question_id": [r.uid for r in self.entries],
                                  "question": [probes.open_question(r, cfg.question_template)
                                               for r in self.entries]})
        pcfg = ParaphraseConfig(k=cfg.k, seed=cfg.seed, max_new_tokens=cfg.paraphrase_tokens,
                                max_attempts=cfg.paraphrase_attempts,
                                threshold=DEFAULT_THRESHOLD if cfg.min_parascore is None
                                else cfg.min_parascore)
        store = RecordStore(self.out / "open_questions" / "paraphrases.jsonl")
        run_paraphrase_stage(questions, self.base, self.fmt, ParaScorer(device=cfg.device), store, pcfg)
        table = paraphrase_table(questions, store)
        write_table(table, self.out / "open_questions" / "paraphrases.csv")
        return {uid: g["paraphrase"].tolist() for uid, g in table.groupby("question_id", sort=False)}

    # ------------------------------------------------------------------ one model state
    def text_settings(self) -> dict:
        """What every state's stored texts depend on (a rerun with other values is refused)."""
        keys = ("model", "subset", "seed", "k", "min_parascore", "question_template", "paraphrase_tokens",
                "paraphrase_attempts", "completion_tokens", "answer_tokens", "rot_tokens")
        out = {k: getattr(self.cfg, k) for k in keys}
        if self.cfg.dtype != "float32":  # named only when not the default: float32 runs resume as before
            out["dtype"] = self.cfg.dtype
        return out

    def collect(self, backend, scorer, reqs: Sequence[EditRequest], open_qs: dict[str, list[str]]):
        """Completions and open-question answers of the current model state, per entry."""
        cfg = self.cfg
        out = {}
        for r in reqs:
            prompts = probes.completion_prompts(r)
            flat = [p for kind in probes.COMPLETION_PROBES for p in prompts[kind]]
            texts = probes.complete(backend, scorer, flat, cfg.completion_tokens, cfg.seed)
            rec, i = {}, 0
            for kind in probes.COMPLETION_PROBES:
                rec[kind] = texts[i:i + len(prompts[kind])]
                i += len(prompts[kind])
            rec["questions"] = open_qs[r.uid]
            rec["answers"] = probes.answer(backend, self.fmt, scorer, open_qs[r.uid], cfg.answer_tokens,
                                           cfg.seed)
            out[r.uid] = rec
        return out

    def add_rots(self, texts: dict[str, dict]) -> None:
        """RoTs by the unedited model (call with all edits restored)."""
        for rec in texts.values():
            rec["rots"] = probes.rules_of_thumb(self.base, self.fmt, rec["questions"], rec["answers"],
                                                self.cfg.rot_tokens, self.cfg.seed)

    def _generate_edited(self, method: str, scorer, group, open_qs):
        if not scorer.can_generate:
            raise SageInputError(f"method {method!r}: generation through its scoring wrapper "
                                 "is not implemented; leave it out of the study")
        return self.collect(self.live, scorer, group, open_qs)

    def pre_records(self, reqs: Sequence[EditRequest], open_qs) -> list[dict]:
        """The unedited model's texts for `reqs`, one record each."""

        scorer = LMScorer(self.lm.model, self.lm.tokenizer)
        out = []
        for r in reqs:
            texts = self.collect(self.base, scorer, [r], open_qs)
            self.add_rots(texts)
            out.append({"key": r.uid, "uid": r.uid, "framework": r.framework, **texts[r.uid]})
        return out

    def method_records(self, method: str, group: Sequence[EditRequest], open_qs, editors: EditorCache) -> list[dict]:
        """Edit with `method` (the whole group in one edit), generate through the edited model,
        restore; one record per entry. `editors` keeps the latest framework's editor across calls."""

        name, _, mode = method.partition(":")
        cfg = self.cfg
        check_batch_mode(name, mode == "batch")
        editor = editors.get(name, cfg.seed, cfg.overrides.get(name, {}), cfg.data, group[0].framework, cfg.subset,
                             mode == "batch", cfg.corpus)
        rows = evaluate(editor, self.lm, group, batch=True,
                        during=lambda scorer, grp: self._generate_edited(name, scorer, grp, open_qs))
        texts = {row["uid"]: row.pop("during") for row in rows}
        self.add_rots(texts)  # after restore: RoTs come from the unedited model
        keep = ("uid", "framework", "edit_seconds", "group_seconds", "batch_size")
        return [{"key": row["uid"], "method": method, **{k: row[k] for k in keep},
                 "edit": {k: v for k, v in row.items() if k not in keep}, **texts[row["uid"]]} for row in rows]

    def run_pre(self, open_qs, executor=None) -> RecordStore:
        check_resume_settings(self.out / "records", self.text_settings(), name="pre.settings.json")
        store = RecordStore(self.out / "records" / "pre.jsonl")
        uids = [r.uid for r in self.entries]
        self._run_units([("pre", g) for g in pending_groups(uids, store, batch=False)], open_qs, store,
                        "before edit", executor)
        return store

    def run_method(self, method: str, open_qs, executor=None) -> RecordStore:
        name, _, mode = method.partition(":")
        cfg = self.cfg
        overrides = {"seed": cfg.seed, **cfg.overrides.get(name, {})}
        settings = {**self.text_settings(), **method_settings(name, cfg.seed, overrides, cfg.corpus),
                    "method": method}
        check_resume_settings(self.out / "records", settings, name=f"{state_name(method)}.settings.json")
        store = RecordStore(self.out / "records" / f"{state_name(method)}.jsonl")
        groups = pending_groups([r.uid for r in self.entries], store, batch=mode == "batch")
        self._run_units([(method, g) for g in groups], open_qs, store, f"{method} edits", executor)
        return store

    def _run_units(self, units, open_qs, store: RecordStore, desc: str, executor) -> None:
        """Units (state, uids) on the executor's study workers (kept for the next state: the study
        releases them at its end); the driver appends each result."""
        if not units:
            return
        ex = make_executor(executor)
        units = [(state, uids, {u: open_qs[u] for u in uids}) for state, uids in units]
        try:
            run_units(ex, functools.partial(StudyWorker, self.cfg), units, key=f"study:{self.cfg.out}", desc=desc,
                      size=lambda unit: len(unit[1]), on_result=lambda _, recs: store.append(recs), release=False)
        finally:
            if ex is not executor:
                ex.close()


class StudyWorker:
    """A study's model state on one worker (model loaded once); `run((state, uids, open_qs))` returns
    the records of those entries before the edit (state "pre") or under one method's edit."""

    def __init__(self, cfg: StudyConfig):
        self.study = _Study(cfg)
        self.by_uid = {r.uid: r for r in self.study.entries}
        self.editors = EditorCache(cfg.device)

    def run(self, unit) -> list[dict]:
        state, uids, open_qs = unit
        reqs = [self.by_uid[u] for u in uids]
        if state == "pre":
            return self.study.pre_records(reqs, open_qs)
        return self.study.method_records(state, reqs, open_qs, self.editors)


# --------------------------------------------------------------------------- scoring
def score_states(states: dict[str, RecordStore], uids: Sequence[str] | dict[str, Sequence[str]],
                 seed: int) -> pd.DataFrame:
    """Long table (state, uid, probe, metric, value) over every state's stored texts (`uids`: the
    same entries for every state, or per state)."""
    from sage.scoring import score_responses

    rows, long = [], []
    for state, store in states.items():
        for uid in (uids[state] if isinstance(uids, dict) else uids):
            rec = store.records[uid]
            for probe in PROBES:
                for i, text in enumerate(rec[probe]):
                    rows.append({"model": state, "question_id": f"{uid}::{probe}", "paraphrase_id": i,
                                 "sample": 0, "answer": text})
                long.append((state, uid, probe, "fluency", mean_ngram_entropy(rec[probe])))
    df = pd.DataFrame(rows)
    res = score_responses(df, on=("answer",), metrics=("sge", "bleu", "rouge_l", "bertscore"),
                          skip_invalid=True, seed=seed, progress=False)
    for q in res.questions.itertuples(index=False):
        uid, probe = q.question_id.split("::")
        for metric, col in (("sge", "sge_answer"), ("bleu", "bleu_answer"),
                            ("rouge_l", "rouge_l_answer"), ("bertscore", "bertscore_answer")):
            long.append((q.model, uid, probe, metric, float(getattr(q, col))))
    return pd.DataFrame(long, columns=["state", "uid", "probe", "metric", "value"])


def paired_changes(scores: pd.DataFrame, methods: Sequence[str], n_boot: int, seed: int) -> pd.DataFrame:
    """Per method, probe and metric: pre and post means and the mean paired change with a CI."""

    # unstack, not pivot_table: an all-undefined (NaN) probe/metric must stay, as a row with n = 0
    wide = scores.drop_duplicates(["state", "uid", "probe", "metric"]).set_index(
        ["uid", "probe", "metric", "state"])["value"].unstack("state")
    rows = []
    for method in methods:
        state = state_name(method)
        for (probe, metric), g in wide.groupby(level=["probe", "metric"], sort=False):
            pre, post = g["pre"].to_numpy(float), g[state].to_numpy(float)
            ok = np.isfinite(pre) & np.isfinite(post)
            ci = bootstrap_mean_ci(post[ok] - pre[ok], n_boot=n_boot, seed=seed)
            rows.append({"method": method, "probe": probe, "metric": metric,
                         "pre": float(pre[ok].mean()) if ok.any() else float("nan"),
                         "post": float(post[ok].mean()) if ok.any() else float("nan"),
                         "change": ci.mean, "ci_low": ci.low, "ci_high": ci.high, "n": ci.n})
    return pd.DataFrame(rows)


def _markdown(changes: pd.DataFrame, edit: dict, cfg: StudyConfig, n_entries: int) -> str:
    lines = ["# Edit-consistency study", "",
             f"Model `{cfg.model}`, {n_entries} CounterMoral {cfg.subset} entries "
             f"({', '.join(cfg.frameworks)}), seed {cfg.seed}. Change = post - pre, mean over entries "
             f"with a 95% paired bootstrap CI ({cfg.n_boot} resamples). Fluency: n-gram entropy (bits).",
             "", "## Edit metrics", "",
             "| Method | Reliability | Action para. | Relation para. | Neighbourhood | Edit s |",
             "|---|---:|---:|---:|---:|---:|"]
    for m, e in edit.items():
        cells = [f"{e[k]['mean']:.3f} ± {e[k]['std']:.3f}" for k in
                 ("reliability", "action_paraphrase", "relation_paraphrase", "neighbourhood_score")]
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {e['edit_seconds']:.2f} |")
    for probe in PROBES:
        sub = changes[changes["probe"] == probe]
        if sub.empty:
            continue
        lines += ["", f"## Probe: {probe}", "", "| Method | " + " | ".join(METRICS) + " |",
                  "|---|" + "---:|" * len(METRICS)]
        pre_cells = []
        for metric in METRICS:
            r = sub[sub["metric"] == metric]
            pre_cells.append(f"{r['pre'].iloc[0]:.3f}" if len(r) else "n/a")
        lines.append("| (pre-edit) | " + " | ".join(pre_cells) + " |")
        for method in cfg.methods:
            cells = []
            for metric in METRICS:
                r = sub[(sub["method"] == method) & (sub["metric"] == metric)]
                cells.append("n/a" if r.empty or not r["n"].iloc[0] else
                             f"{r['change'].iloc[0]:+.3f} [{r['ci_low'].iloc[0]:+.3f}, {r['ci_high'].iloc[0]:+.3f}]")
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_study(cfg: StudyConfig, lm=None, executor=None) -> dict:
    """`executor` (an `Executor` or its name; default: this process) runs the pre-edit texts and each
    method's edits as (state, entry) units on its workers; records are written here."""

    ex = make_executor(executor)
    try:
        return _run_study(cfg, lm, ex)
    finally:
        if ex is not executor:
            ex.close()


def write_config(out: Path, config, seed: int) -> dict:
    """`out/config.json`: a study's configuration (a dataclass) and provenance; returns the provenance."""
    out.mkdir(parents=True, exist_ok=True)
    prov = provenance(seed)
    write_text(out / "config.json", json.dumps({"config": asdict(config), "provenance": prov}, indent=2,
                                               default=str) + "\n")
    return prov


def _run_study(cfg: StudyConfig, lm, executor) -> dict:
    study = _Study(cfg, lm)
    out = study.out
    prov = write_config(out, cfg, cfg.seed)
    open_qs = study.open_paraphrases()
    states = {"pre": study.run_pre(open_qs, executor)}
    for method in cfg.methods:
        states[state_name(method)] = study.run_method(method, open_qs, executor)
    executor.release(f"study:{cfg.out}")
    uids = [r.uid for r in study.entries]
    scores = score_states(states, uids, cfg.seed)
    write_table(scores, out / "scores.csv")
    changes = paired_changes(scores, cfg.methods, cfg.n_boot, cfg.seed)
    write_table(changes, out / "changes.csv")
    edit = {}
    for method in cfg.methods:
        recs = [states[state_name(method)].records[u] for u in uids]
        edit[method] = aggregate({"framework": r["framework"], **r["edit"]} for r in recs)
        edit[method]["edit_seconds"] = float(np.median([r["edit_seconds"] for r in recs]))
    summary = {"config": asdict(cfg), "n_entries": len(uids), "edit_metrics": edit,
               "changes": changes.to_dict(orient="records"), "provenance": prov}
    write_text(out / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    write_text(out / "summary.md", _markdown(changes, edit, cfg, len(uids)))
    return summary
