"""Compare hyperparameter variants of one editing method on the same CounterMoral entries (how
the defaults in sage/editing/TUNING.md were chosen).

Each variant edits the first `--limit` entries of every framework, one at a time (or, with
`--batch`, all of a framework's chosen entries in one edit). The table reports the paper's
columns and the damage measures (mean over entries), median seconds per edit, and each variant's
paired difference from the first (same entries; mean with a 95% bootstrap CI). Writes table.md
and summary.json (config, per-entry measures, editor diagnostics, versions, git hash).

    python experiments/editing_sweep.py --method memit --batch --limit 10 \
        --variants '{"lambda 100": {"cov_weight": 100}, "lambda 20000": {"cov_weight": 20000}}' \
        --out experiments/results/sweeps/memit_lambda
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path

from paired_variants import paired_difference_lines, write_results

REPO = Path(__file__).resolve().parents[1]
COLS = ("reliability", "action_paraphrase", "relation_paraphrase", "neighbourhood_score",
        "neighbourhood_dlogp", "neighbourhood_success", "neighbourhood_new_rise", "locality")
# the unedited model's value of a column where it has one (the others are 0 or 1 before editing)
PRE = {"reliability": "pre_reliability", "action_paraphrase": "pre_action_paraphrase",
       "relation_paraphrase": "pre_relation_paraphrase", "neighbourhood_success": "pre_neighbourhood_success"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", required=True)
    ap.add_argument("--variants", required=True, help="JSON object {label: hyperparameter overrides}")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--subset", default="broad", choices=["broad", "specific"])
    ap.add_argument("--limit", type=int, default=3, help="entries per framework")
    ap.add_argument("--batch", action="store_true", help="one edit per framework holding its entries")
    ap.add_argument("--data", default=None)
    ap.add_argument("--corpus", default=None, help="text file for key statistics")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    from sage.editing.editor_base import make_editor
    from sage.editing.dataset import FRAMEWORKS, default_data_dir, load_countermoral
    from sage.editing.entry_measures import aggregate, entry_metrics, observe
    from sage.editing.runner import editing_context
    from sage.editing.target_scoring import LMScorer
    from sage.errors import SageInputError
    from sage.models.causal_lm import load_causal_lm

    try:
        variants = json.loads(args.variants)
        data = args.data or default_data_dir()
        by_fw = {fw: load_countermoral(data, fw, args.subset, args.limit) for fw in FRAMEWORKS}
    except (ValueError, SageInputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    lm = load_causal_lm(args.model)
    base = LMScorer(lm.model, lm.tokenizer)
    reqs = [r for fw in FRAMEWORKS for r in by_fw[fw]]
    pres = {r.uid: observe(base, r) for r in reqs}
    rows = []
    for label, overrides in variants.items():
        metrics, secs, diagnostics = {}, [], {}
        for fw in FRAMEWORKS:
            ctx = editing_context(data, fw, args.subset, args.batch, corpus=args.corpus)
            editor = make_editor(args.method, {"seed": args.seed, **overrides}, ctx)
            groups = [by_fw[fw]] if args.batch else [[r] for r in by_fw[fw]]
            for group in groups:
                t0 = time.perf_counter()
                handle = editor.apply(lm, group)
                secs.append(time.perf_counter() - t0)
                scorer = handle.scoring_model()
                for r in group:
                    metrics[r.uid] = entry_metrics(pres[r.uid], observe(scorer, r))
                handle.restore()
            diagnostics[fw] = editor.diagnostics()
        ordered = [metrics[r.uid] for r in reqs]
        agg = aggregate(ordered, COLS)
        rows.append({"label": label, "overrides": overrides, "median_s": statistics.median(secs), **agg,
                     "diagnostics": diagnostics,
                     "entries": [{"uid": r.uid, **{c: m[c] for c in (*COLS, *PRE.values())}}
                                 for r, m in zip(reqs, ordered)]})
        logging.info("%s: %s", label, {c: round(agg[c]["mean"], 4) for c in COLS})
    mode = "one edit per framework" if args.batch else "one edit at a time"
    lines = [f"# {args.method}: {', '.join(variants)} ({args.model})", "",
             f"{len(reqs)} {args.subset} entries ({args.limit} per framework, {mode}), key statistics "
             f"from {args.corpus or 'the default corpus'}, seed {args.seed}. Mean over entries.", "",
             "| Variant | " + " | ".join(COLS) + " | median s/edit |", "|---|" + "---:|" * (len(COLS) + 1)]
    pre = aggregate([{c: e[p] for c, p in PRE.items()} for e in rows[0]["entries"]], tuple(PRE))
    lines.append("| before editing | " + " | ".join(f"{pre[c]['mean']:.3f}" if c in pre else "–"
                                                   for c in COLS) + " | |")
    for row in rows:
        cells = [f"{row[c]['mean']:.4f}" if c == "neighbourhood_score" else f"{row[c]['mean']:.3f}" for c in COLS]
        lines.append(f"| {row['label']} | " + " | ".join(cells) + f" | {row['median_s']:.2f} |")
    ref = rows[0]
    if len(rows) > 1:
        lines += ["", f"Paired difference from `{ref['label']}` (the same entries; mean [95% bootstrap CI]):",
                  "", "| Variant | " + " | ".join(COLS) + " |", "|---|" + "---:|" * len(COLS)]
    lines += paired_difference_lines(rows, ref, COLS, args.seed, label="label", reference={"from": ref["label"]})
    return write_results(args, lines, rows)


if __name__ == "__main__":
    sys.exit(main())
