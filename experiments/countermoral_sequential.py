"""Sequential editing on CounterMoral (issue 32 §2): edit after edit on one model, never restored,
the regime the CounterMoral authors' published Table 4 really ran (EasyEdit `edit()` applying one
request at a time with `keep_original_weights` misspelt, so nothing was restored).

Runs each method's sequence per framework (`sage edit --sequential` per framework: one sequence
each, as the authors edited each framework's entries on a fresh model), writes the runs beside the
single and batch ones (`<out>/<method>/<subset>-sequential-<framework>/`), regenerates
`tables.md` and draws `sequential.png`: retention (reliability of every edit so far) and
neighbourhood drift (|d log P| against the unedited model) versus the number of edits.

    python experiments/countermoral_sequential.py [--methods memit,alphaedit] [--frameworks care_ethics]
        [--limit 300] [--checkpoints 10,30,100,300] [--out DIR] [--plot-only] [--prefill-unedited]
        [--device cuda] [--dtype float32]

On two cores, run two methods side by side (one torch thread each, OMP_NUM_THREADS=1). Their
unedited scores are shared (`sage/editing/unedited_scores.py`), but two runs that start together
would both compute them; `--prefill-unedited` instead scores the sequence's entries on the
unedited model last entry first and stops where it meets entries already scored, so started
beside the first method's run it halves that phase (about 20 min for 300 entries on one thread),
and the second method's run, started after it, finds every score cached.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _names(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def plot(out: Path) -> Path | None:
    """sequential.png from every sequential summary under `out`: one line per (method, framework)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summaries = [json.loads(p.read_text()) for p in sorted(out.glob("*/*-sequential*/summary.json"))]
    if not summaries:
        return None
    fig, (ax_r, ax_n) = plt.subplots(1, 2, figsize=(10, 4))
    methods = sorted({s["method"] for s in summaries})
    frameworks = sorted({", ".join(s["frameworks"]) for s in summaries})
    styles = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ("-", "v")]
    for s in summaries:  # one colour per method, one line style per framework
        fw = ", ".join(s["frameworks"])
        line, marker = styles[frameworks.index(fw) % len(styles)]
        kw = {"color": f"C{methods.index(s['method'])}", "linestyle": line, "marker": marker,
              "label": f"{s['method']} ({fw})"}
        steps = [c["step"] for c in s["checkpoints"]]
        ax_r.plot(steps, [c["retention"] for c in s["checkpoints"]], **kw)
        ax_n.plot([0] + steps, [0.0] + [c["measures"]["neighbourhood_dlogp"]["mean"] for c in s["checkpoints"]],
                  **kw)  # 0 edits: the unedited model, no change
    ax_r.set(xlabel="edits made", ylabel="retention (reliability of all edits so far)", ylim=(0, 1.02))
    ax_n.set(xlabel="edits made", ylabel="neighbourhood |d log P| vs unedited")
    for ax in (ax_r, ax_n):
        ax.grid(alpha=0.3)
    ax_r.legend(fontsize=7)
    fig.suptitle(f"Sequential editing on CounterMoral ({summaries[0]['subset']}, {summaries[0]['model']})")
    fig.tight_layout()
    path = out / "sequential.png"
    fig.savefig(path, dpi=120)
    return path


NAMES = {"memit": "MEMIT", "alphaedit": "AlphaEdit", "rome": "ROME", "ft-m": "FT-M", "ft-l": "FT-L",
         "lora": "LoRA", "grace": "GRACE"}
COLUMNS = (("reliability", "reliability"), ("reliability_exact", "reliability (exact)"),
           ("action_paraphrase", "action para."), ("action_paraphrase_exact", "action para. (exact)"),
           ("relation_paraphrase", "relation para."), ("relation_paraphrase_exact", "relation para. (exact)"),
           ("neighbourhood_dlogp", "\\|d log P\\|"),
           ("locality", "locality"), ("reliability_gen", "reliability (gen.)"))
FIRST = 10  # the first edits of a sequence, followed through every checkpoint


def _cell(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def comparison(out: Path) -> str:
    """sequential.md: per framework and method, one edit at a time (the single run's records of
    the same entries) beside the sequence measured right after each edit and at each checkpoint
    (every edit so far), then drift and the fate of the first edits; every number read from the
    records under `out`."""
    from sage.data.records import RecordStore
    from sage.editing.entry_measures import aggregate

    keys = [k for k, _ in COLUMNS]
    lines = ["# Sequential editing beside one edit at a time (written by experiments/countermoral_sequential.py)", ""]
    for path in sorted(out.glob("*/*-sequential-*/summary.json")):
        s = json.loads(path.read_text())
        if len(s["frameworks"]) != 1:
            continue
        (fw,), method = s["frameworks"], s["method"]
        name = NAMES.get(method, method)
        points = list(s["checkpoints"])
        marks = " / ".join(str(c["step"]) for c in points)
        done = "" if s["n_edits"] >= s["n_expected"] else f" (partial: {s['n_edits']} of {s['n_expected']} edits)"
        lines += [f"## {name}, {s['subset']} {fw}{done}", "",
                  f"| {s['n_expected']} {fw} entries | " + " | ".join(h for _, h in COLUMNS) + " |",
                  "|---|" + "---:|" * len(COLUMNS)]
        single = out / method / s["subset"] / "entries.jsonl"
        if single.exists():
            rows = [r for r in RecordStore(single, key_field="uid").records.values() if r["framework"] == fw]
            means = aggregate(rows, keys)
            lines.append(f"| one edit at a time (single-run records, same {len(rows)} entries) | "
                         + " | ".join(_cell(means.get(k, {}).get("mean")) for k in keys) + " |")
        after = s["frameworks_after_each_edit"].get(fw, {})
        lines.append("| sequential, right after each edit (the published regime) | "
                     + " | ".join(_cell(after.get(k, {}).get("mean")) for k, _ in COLUMNS) + " |")
        lines.append(f"| all edits so far at {marks} edits | " + " | ".join(
            " / ".join(_cell(c["measures"].get(k, {}).get("mean"), 2 if k == "neighbourhood_dlogp" else 3)
                       for c in points) for k, _ in COLUMNS) + " |")
        base = s.get("drift_baseline") or {}
        ppl = " / ".join(f"{c['drift']['perplexity']:,.2f}" for c in points)
        flu = " / ".join(f"{c['drift']['fluency']:.2f}" for c in points)
        lines += ["", f"Held-out perplexity (unedited {base.get('perplexity', float('nan')):.2f}) after {marks} "
                  f"edits: {ppl}. Fluency (unedited {base.get('fluency', float('nan')):.2f} bits): {flu}."]
        first = json.loads((path.parent / "settings.json").read_text())["order"][:FIRST]
        edits = RecordStore(path.parent / "edits.jsonl", key_field="uid").records
        records = RecordStore(path.parent / "checkpoints.jsonl", key_field="step").records
        def held(rows) -> float:  # mean reliability of the first edits in `rows`
            return aggregate(rows, ["reliability"])["reliability"]["mean"]

        fate = [f"{held(edits[u] for u in first if u in edits):.2f} right after"]
        fate += [f"{held(records[c['step']]['per_edit'][u] for u in first):.2f} at {c['step']}"
                 for c in points if c["step"] > FIRST and c["step"] in records]
        lines += [f"Reliability of the first {FIRST} edits: " + ", ".join(fate) + ".", ""]
    return "\n".join(lines) + "\n"


def prefill(unedited, sequence) -> tuple[int, int]:
    """Score `sequence`'s entries on the unedited model into `unedited` (an `UneditedScores`),
    last entry first, until one is found there already (a run walking the sequence forwards got
    that far). Returns (entries scored, entries found cached)."""
    hits, misses = unedited.hits, unedited.misses
    for req in reversed(sequence):
        unedited.get(req)
        if unedited.hits > hits:
            break
    return unedited.misses - misses, unedited.hits - hits


def prefill_unedited(args, data: Path) -> int:
    """`--prefill-unedited`: every framework's sequence through `prefill`."""
    from sage.editing.dataset import load_all
    from sage.editing.sequential import planned_order
    from sage.editing.unedited_scores import UneditedScores
    from sage.models.causal_lm import load_causal_lm

    unedited = UneditedScores(load_causal_lm(args.model, device=args.device, dtype=args.dtype))
    try:
        for fw in _names(args.frameworks):
            sequence = planned_order(load_all(str(data), [fw], args.subset, args.limit), args.seed)
            scored, cached = prefill(unedited, sequence)
            logging.info("%s: %d entries scored, %d found cached", fw, scored, cached)
    finally:
        unedited.close()
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--methods", default="memit,alphaedit")
    ap.add_argument("--frameworks", default="care_ethics,deontology,utilitarianism,virtue_ethics")
    ap.add_argument("--subset", default="specific", choices=["broad", "specific"])
    ap.add_argument("--limit", type=int, default=None, help="first N entries per framework (default: all 300)")
    ap.add_argument("--checkpoints", default=None, help="comma-separated (default: 10,30,100,300 below the length)")
    ap.add_argument("--data", default=None, help="CounterMoral directory (default: the sage cache's copy)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="where the model runs (cpu, cuda, cuda:1)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="the weights' dtype (editing numerics stay in float32/float64)")
    ap.add_argument("--plot-only", action="store_true", help="edit nothing: tables and the plot from the runs")
    ap.add_argument("--prefill-unedited", action="store_true",
                    help="edit nothing: score each sequence's entries on the unedited model, last first, into the "
                         "shared cache, stopping at the first one already there (run beside a sequential run)")
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "countermoral")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    from sage.editing.dataset import default_data_dir
    from sage.editing.runner import RunConfig
    from sage.editing.sequential import SequentialConfig, run_sequential
    from sage.editing.tables import write_tables
    from sage.errors import SageInputError
    from sage.models.causal_lm import load_causal_lm

    data = Path(args.data) if args.data else default_data_dir()
    marks = tuple(int(x) for x in _names(args.checkpoints)) if args.checkpoints else None
    try:
        if args.prefill_unedited:
            return prefill_unedited(args, data)
        if not args.plot_only:
            lm = load_causal_lm(args.model, device=args.device, dtype=args.dtype)
            for method in _names(args.methods):
                for fw in _names(args.frameworks):
                    cfg = RunConfig(method=method, frameworks=[fw], subset=args.subset, model=args.model,
                                    out=args.out, data=str(data), limit=args.limit, seed=args.seed,
                                    device=args.device, dtype=args.dtype)
                    s = run_sequential(SequentialConfig(cfg, checkpoints=marks), lm=lm)
                    logging.info("%s %s: retention %s", method, fw,
                                 [round(c["retention"], 3) for c in s["checkpoints"]])
        write_tables(args.out, data)
        (args.out / "sequential.md").write_text(comparison(args.out), encoding="utf-8")
        path = plot(args.out)
    except SageInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out / 'tables.md'}, {args.out / 'sequential.md'}" + (f" and {path}" if path else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
