"""Sequential editing on CounterMoral (issue 32 §2): edit after edit on one model, never restored,
the regime the CounterMoral authors' published Table 4 really ran (EasyEdit `edit()` applying one
request at a time with `keep_original_weights` misspelt, so nothing was restored).

Runs each method's sequence per framework (`sage edit --sequential` per framework: one sequence
each, as the authors edited each framework's entries on a fresh model), writes the runs beside the
single and batch ones (`<out>/<method>/<subset>-sequential-<framework>/`), regenerates
`tables.md` and draws `sequential.png`: retention (reliability of every edit so far) and
neighbourhood drift (|d log P| against the unedited model) versus the number of edits.

    python experiments/countermoral_sequential.py [--methods memit,alphaedit] [--frameworks care_ethics]
        [--limit 300] [--checkpoints 10,30,100,300] [--out DIR] [--plot-only]
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
    for s in summaries:
        label = f"{s['method']} ({', '.join(s['frameworks'])})"
        steps = [c["step"] for c in s["checkpoints"]]
        ax_r.plot(steps, [c["retention"] for c in s["checkpoints"]], marker="o", label=label)
        ax_n.plot([0] + steps, [0.0] + [c["measures"]["neighbourhood_dlogp"]["mean"] for c in s["checkpoints"]],
                  marker="o", label=label)  # 0 edits: the unedited model, no change
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
    ap.add_argument("--plot-only", action="store_true", help="edit nothing: tables and the plot from the runs")
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
        if not args.plot_only:
            lm = load_causal_lm(args.model)
            for method in _names(args.methods):
                for fw in _names(args.frameworks):
                    cfg = RunConfig(method=method, frameworks=[fw], subset=args.subset, model=args.model,
                                    out=args.out, data=str(data), limit=args.limit, seed=args.seed)
                    s = run_sequential(SequentialConfig(cfg, checkpoints=marks), lm=lm)
                    logging.info("%s %s: retention %s", method, fw,
                                 [round(c["retention"], 3) for c in s["checkpoints"]])
        write_tables(args.out, data)
        path = plot(args.out)
    except SageInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out / 'tables.md'}" + (f" and {path}" if path else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
