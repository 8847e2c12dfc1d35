"""Markdown tables numbered and titled as in the CounterMoral paper: Table 1 (specific actions,
300 per framework), Table 2 (broad actions, 30 per framework), Table 4 (batch editing: all
entries of a framework in one edit).

Each table has two parts:
(a) the paper's four columns, ours beside the published GPT2-XL numbers (where
    `published-results-gpt2-xl/` is present), per method and framework;
(b) the measures that can see damage, each with its pre-edit baseline, per method (overall):
    the paper's |dP| is floored at its ceiling (mean pre-edit P(target_true)), so it is shown
    next to it, then |d log P|, CounterFact-style neighbourhood success, the rise of
    P(target_new) on neighbours and locality.
A run that is not complete says how many of its entries are in; under each table, notes name the
runs whose records carry no per-entry git hash and those whose library versions were not recorded.
Where any run of a table has the generation measures (`generation_measures.py`), part (b) adds
them (pre → post; n/a for a run made before they existed, or a wrapper that cannot generate).
Sequential runs (`sequential.py`) get their own table, one row per checkpoint.
"""
from __future__ import annotations

import json
from pathlib import Path

from sage.editing.dataset import FRAMEWORKS
from sage.editing.entry_measures import combine
from sage.outputs import write_text

PAPER_COLUMNS = (("reliability", "reliability"),
                 ("action_paraphrase", "generalization_action_paraphrase"),
                 ("relation_paraphrase", "generalization_relation_paraphrase"),
                 ("neighbourhood_score", "neighbourhood_score"))
TABLES = (
    ("Table 1: specific actions (300 per framework, one edit at a time)", "specific", False,
     "all-actions"),
    ("Table 2: broad actions (30 per framework, one edit at a time)", "broad", False,
     "broad-actions"),
    ("Table 4: batch editing, specific actions (all 300 entries of a framework in one edit)",
     "specific", True, "all-actions"),
    ("Table 4 (broad): batch editing, broad actions (all 30 entries of a framework in one edit)",
     "broad", True, "broad-actions"),
)
#: our method name -> the published file, and whether the paper's numbers sit beside our batch
#: runs (its evaluation code passes MEMIT a framework's whole subset through EasyEdit's `edit()`,
#: which applies and scores one request at a time and, with the misspelt `keep_original_weights`,
#: restores nothing: sequential editing; every other method one entry at a time on a freshly
#: loaded model). The paper's "FT" is EasyEdit's FT with the `prompt_last` objective: FT-L.
PUBLISHED = {"ft-l": ("ft", False), "lora": ("lora", False), "rome": ("rome", False),
             "ike": ("ike", False), "serac": ("serac", False), "memit": ("memit", True)}
ENTRIES_PER_FRAMEWORK = {"broad": 30, "specific": 300}


def published(data_dir: Path | None, method: str, batch: bool) -> dict | None:
    if data_dir is None or method not in PUBLISHED or PUBLISHED[method][1] != batch:
        return None
    path = Path(data_dir) / "published-results-gpt2-xl" / f"{PUBLISHED[method][0]}.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())["results"]
    except (json.JSONDecodeError, KeyError):
        return None


def _cell(stat: dict | None, digits: int = 3) -> str:
    return "–" if not stat else f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f}"


def _digits(column: str) -> int:
    return 4 if column == "neighbourhood_score" else 3


def _mean(stats: dict, key: str, digits: int = 3) -> str:
    return f"{stats[key]['mean']:.{digits}f}" if key in stats else "–"


def _pre_post(stats: dict, key: str) -> str:
    if key not in stats:
        return "–"
    return f"{_mean(stats, 'pre_' + key)} → {_mean(stats, key)}"


def _label(s: dict) -> str:
    name = s.get("label", s["method"])
    expected = s.get("n_expected")
    if expected and s["n_entries"] < expected:
        return f"{name} (partial: {s['n_entries']} of {expected})"
    return name


def _unrecorded(s: dict) -> int:
    """Entries of a run without a per-entry git hash: a summary without `records_git` was written
    before records carried one, so none of its entries does."""
    counts = s.get("records_git")
    return s["n_entries"] if counts is None else counts.get("unrecorded", 0)


def _provenance_notes(rows: list[dict]) -> list[str]:
    notes = []
    missing = [f"{s['method']} ({n} of {s['n_entries']})" for s in rows if (n := _unrecorded(s))]
    if missing:
        notes.append("Records without per-entry git hash (made before records carried it): "
                     + ", ".join(missing) + ".")
    unversioned = [s["method"] for s in rows if not (s.get("versions") or {}).get("torch")]
    if unversioned:
        notes.append("torch / transformers versions not recorded when the run was made: "
                     + ", ".join(unversioned) + " (`versions_note` in its summary.json).")
    return notes


def _paper_part(rows: list[dict], data_dir: Path | None, pub_key: str) -> list[str]:
    head = ["Method", "Framework"] + [f"{c} (ours)" for c, _ in PAPER_COLUMNS]
    head += [f"{c} (GPT2-XL)" for c, _ in PAPER_COLUMNS]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in rows:
        pub = published(data_dir, s["method"], s["batch"])
        for fw in [fw for fw in FRAMEWORKS if fw in s["frameworks"]] + ["overall"]:
            stats = s["overall"] if fw == "overall" else s["frameworks"][fw]
            cells = [_label(s), fw] + [_cell(stats.get(c), _digits(c)) for c, _ in PAPER_COLUMNS]
            ref = None
            if pub and fw != "overall":
                ref = pub.get(fw.upper(), {}).get(pub_key, {}).get("edited", {}).get("AGS")
            cells += [_cell(ref.get(p), _digits(c)) if ref else "–" for c, p in PAPER_COLUMNS]
            out.append("| " + " | ".join(cells) + " |")
    return out


#: teacher-forced exact match (every target token the argmax, i.e. the greedy continuation is the target):
#: all-or-nothing beside the partial-credit token accuracy, and so like for like with the generated shares
EXACT_COLUMNS = (("reliability_exact", "reliability (exact)"), ("action_paraphrase_exact", "action para. (exact)"),
                 ("relation_paraphrase_exact", "relation para. (exact)"))
GEN_COLUMNS = (("reliability_gen", "reliability (gen.)"), ("action_paraphrase_gen", "action para. (gen.)"),
               ("relation_paraphrase_gen", "relation para. (gen.)"), ("neighbourhood_gen", "nbr. kept (gen.)"))


def _gen_cell(stats: dict, key: str) -> str:
    """pre → post of a generation measure; n/a where a run has no value."""
    if key not in stats and "pre_" + key not in stats:
        return "n/a"
    post = _mean(stats, key) if key in stats else "n/a"
    return f"{_mean(stats, 'pre_' + key) if 'pre_' + key in stats else 'n/a'} → {post}"


def _damage_part(rows: list[dict]) -> list[str]:
    head = ["Method", "n", "reliability", "action para.", "relation para."]
    head += [title for _, title in EXACT_COLUMNS]
    head += ["|dP| (ceiling)", "|d log P|", "nbr. success", "new-target rise", "locality",
            "routed edit / action / relation / nbr."]
    gen = any(k in s["overall"] or "pre_" + k in s["overall"] for s in rows for k, _ in GEN_COLUMNS)
    if gen:  # only tables with runs that measured it: older tables are written as before
        head += [title for _, title in GEN_COLUMNS]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in rows:
        st = s["overall"]
        routed = " / ".join(_mean(st, f"routed_{k}", 2)
                            for k in ("edit", "action", "relation", "neighbour"))
        cells = [_label(s), str(s["n_entries"]), _pre_post(st, "reliability"),
                 _pre_post(st, "action_paraphrase"), _pre_post(st, "relation_paraphrase"),
                 *(_pre_post(st, key) for key, _ in EXACT_COLUMNS),
                 f"{_mean(st, 'neighbourhood_score', 4)} ({_mean(st, 'neighbourhood_score_ceiling', 4)})",
                 _mean(st, "neighbourhood_dlogp"), _pre_post(st, "neighbourhood_success"),
                 _mean(st, "neighbourhood_new_rise"), _mean(st, "locality"),
                 routed if "routed_edit" in st else "–"]
        if gen:
            cells += [_gen_cell(st, key) for key, _ in GEN_COLUMNS]
        out.append("| " + " | ".join(cells) + " |")
    return out


SEQUENTIAL_TITLE = "Sequential editing: edit after edit on one model, never restored"
SEQUENTIAL_INTRO = """Every edit so far measured at each checkpoint on the model as it stands (retention =
reliability of the earlier edits), against each entry's scores on the unedited model; drift:
perplexity on held-out sage-responses text and n-gram-entropy fluency, unedited → now."""


def _drift_cell(base: dict | None, now: dict, key: str, digits: int) -> str:
    value = now.get(key)
    if value is None:
        return "n/a"
    before = (base or {}).get(key)
    return f"{before:.{digits}f} → {value:.{digits}f}" if before is not None else f"{value:.{digits}f}"


def _sequential_part(summaries: list[dict]) -> list[str]:
    head = ["Method", "Subset", "Edits", "retention", "retention (exact)", "retention (gen.)", "action para.",
            "action para. (exact)", "relation para.", "relation para. (exact)",
            "|d log P|", "nbr. success", "locality", "perplexity", "fluency"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        label = _limit(s) + ("" if s["n_edits"] >= s["n_expected"] else
                               f" (partial: {s['n_edits']} of {s['n_expected']} edits)")
        subset = s["subset"] + ("" if len(s.get("frameworks", [])) == len(FRAMEWORKS)
                                else f" ({', '.join(s.get('frameworks', []))})")
        for c in s["checkpoints"]:
            st = c["measures"]
            cells = [label, subset, str(c["step"]), _mean(st, "reliability"), _mean(st, "reliability_exact"),
                     _mean(st, "reliability_gen"), _mean(st, "action_paraphrase"), _mean(st, "action_paraphrase_exact"),
                     _mean(st, "relation_paraphrase"), _mean(st, "relation_paraphrase_exact"),
                     _mean(st, "neighbourhood_dlogp"), _mean(st, "neighbourhood_success"), _mean(st, "locality"),
                     _drift_cell(s.get("drift_baseline"), c["drift"], "perplexity", 2),
                     _drift_cell(s.get("drift_baseline"), c["drift"], "fluency", 3)]
            out.append("| " + " | ".join(cells) + " |")
    return out


INTRO = """# CounterMoral editing results

Ours: mean ± std over entries on the bundled model. GPT2-XL: the authors' published numbers
(AGS aggregation) for the methods and mode they ran: MEMIT over a framework's whole subset as
sequential edits (EasyEdit's `edit()`, one request applied and scored at a time, nothing
restored), shown beside our Table 4, where all of a framework's edits are one update; the others
one edit at a time; their FT is EasyEdit's FT-L objective. Their neighbourhood score used the
probability of the last sub-token of `target_true` without a leading space, so it is near 0 for
every method; ours uses the whole " target_true" sequence.

Which numbers to read: part (a) of each table is for comparison with the paper. For damage to
unrelated prompts read part (b): the paper's |dP| can never exceed its ceiling (the mean
pre-edit P(target_true) on the neighbours, shown in brackets), so it looks harmless for every
method; |d log P|, neighbourhood success (P(target_true) > P(target_new), pre → post), the
rise of log P(target_new) on neighbours and locality (share of unchanged argmax tokens) are
not floored. Pre-edit values (pre → post) show what the unedited model already gets right.
See `README.md` in the results folder for each column's definition and reference.
"""


SEQUENTIAL_TABLE4 = ("Table 4 (sequential, as published): edit after edit on one model, each entry scored right "
                     "after its own edit, nothing restored")
PUB_KEYS = {"specific": "all-actions", "broad": "broad-actions"}


def _limit(s: dict) -> str:
    """A sequential run's method, with the entries it took where it was limited."""
    return s["method"] + (f" (first {s['limit']} per framework)" if s.get("limit") else "")


def _as_published(sequential: list[dict]) -> list[dict]:
    """Rows for `_paper_part` from sequential runs: the measures right after each edit (the regime of
    the paper's Table 4), per framework; one row per (method, subset), frameworks of several runs
    merged. The overall row is the run's own where there is one run, else pooled from
    one complete run per framework (`entry_measures.combine`: mean and std over all their edits),
    else left empty: an overall of some frameworks would read as the whole subset's."""
    rows: dict[tuple, dict] = {}
    for s in sequential:
        key = (s["method"], s["subset"])
        row = rows.setdefault(key, {"method": s["method"], "subset": s["subset"], "batch": True, "label": _limit(s),
                                    "frameworks": {}, "overall": {}, "n_entries": 0, "n_expected": 0, "runs": 0,
                                    "parts": {}})
        row["frameworks"].update(s.get("frameworks_after_each_edit", {}))
        row["n_entries"] += s["n_edits"]
        row["n_expected"] += s["n_expected"]
        row["runs"] += 1
        row.setdefault("first", s["after_each_edit"])
        if len(s["frameworks"]) == 1 and s["n_edits"] >= s["n_expected"]:
            row["parts"][s["frameworks"][0]] = s["after_each_edit"]
    for row in rows.values():
        parts = row.pop("parts")
        if row["runs"] == 1:
            row["overall"] = row.pop("first")
        elif row["runs"] == len(parts) and set(parts) == set(FRAMEWORKS):
            row["overall"] = combine(parts[fw] for fw in FRAMEWORKS)
        row.pop("first", None)
    return list(rows.values())


def tables(out_dir: Path, data_dir: Path | None) -> str:
    summaries = [json.loads(p.read_text()) for p in sorted(Path(out_dir).glob("*/*/summary.json"))]
    sequential = [s for s in summaries if s.get("sequential")]
    summaries = [s for s in summaries if not s.get("sequential")]
    parts = [INTRO]
    for title, subset, batch, pub_key in TABLES:
        rows = [s for s in summaries if s["batch"] == batch and s["subset"] == subset]
        if not rows:
            continue
        parts += [f"\n## {title}\n", "### (a) the paper's columns\n"]
        parts += _paper_part(rows, data_dir, pub_key)
        parts += ["", "### (b) damage and baselines (overall, pre → post)\n"]
        parts += _damage_part(rows)
        for note in _provenance_notes(rows):
            parts += ["", note]
    if sequential:
        for subset in ("specific", "broad"):
            rows = [r for r in _as_published(sequential) if r["subset"] == subset]
            if rows:
                parts += [f"\n## {SEQUENTIAL_TABLE4} ({subset})\n", "### (a) the paper's columns\n"]
                parts += _paper_part(rows, data_dir, PUB_KEYS[subset])
                parts += ["", "### (b) damage and baselines (overall, pre → post)\n"]
                parts += _damage_part([r for r in rows if r["overall"]])
        parts += [f"\n## {SEQUENTIAL_TITLE}\n", SEQUENTIAL_INTRO, ""]
        parts += _sequential_part(sequential)
    return "\n".join(parts) + "\n"


def write_tables(out_dir: Path, data_dir: Path | None) -> Path:
    path = Path(out_dir) / "tables.md"
    write_text(path, tables(out_dir, data_dir))
    return path
