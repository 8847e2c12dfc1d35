"""ROME layer sweep on broad CounterMoral entries with the corpus covariance (how the default
layer for a model is chosen; see sage/editing/TUNING.md).

For each layer, ROME edits the first `--limit` broad entries of every framework one at a time and
the table reports mean reliability, action/relation-paraphrase generalization, neighbourhood score
and median seconds per edit, then each layer's paired difference from the default layer (same
entries; mean with a 95% bootstrap CI). Writes table.md and summary.json (config, per-entry
metrics, versions, git hash).

    python experiments/rome_layer_sweep.py [--model NAME] [--layers 2,4,6,8,12,16] [--limit 3]
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

from paired_variants import paired_difference_lines, write_results

REPO = Path(__file__).resolve().parents[1]
COLS = ("reliability", "action_paraphrase", "relation_paraphrase", "neighbourhood_score", "locality")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--layers", default="2,4,6,8,12,16")
    ap.add_argument("--limit", type=int, default=3, help="broad entries per framework")
    ap.add_argument("--data", default=None)
    ap.add_argument("--corpus", default=None, help="text file for key statistics (default: self-generated)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "rome_layer_sweep")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    from sage.editing.editor_base import EditContext, make_editor
    from sage.editing.dataset import FRAMEWORKS, default_data_dir, load_countermoral
    from sage.editing.entry_measures import aggregate, entry_metrics, observe
    from sage.editing.rome import RomeHParams
    from sage.editing.target_scoring import LMScorer
    from sage.errors import SageInputError
    from sage.models.causal_lm import load_causal_lm

    try:
        layers = [int(x) for x in args.layers.split(",") if x.strip()]
        data = args.data or default_data_dir()
        reqs = [r for fw in FRAMEWORKS for r in load_countermoral(data, fw, "broad", args.limit)]
    except (ValueError, SageInputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    lm = load_causal_lm(args.model)
    base = LMScorer(lm.model, lm.tokenizer)
    pres = [observe(base, r) for r in reqs]
    rows = []
    for layer in layers:
        editor = make_editor("rome", {"layer": layer, "seed": args.seed},
                             EditContext(pool=reqs, corpus=args.corpus))
        editor.apply(lm, [reqs[0]]).restore()  # statistics for this layer, outside the timing
        metrics, secs = [], []
        for r, pre in zip(reqs, pres):
            t0 = time.perf_counter()
            handle = editor.apply(lm, [r])
            secs.append(time.perf_counter() - t0)
            metrics.append(entry_metrics(pre, observe(handle.scoring_model(), r)))
            handle.restore()
        agg = aggregate(metrics, COLS)
        rows.append({"layer": layer, "median_s": statistics.median(secs), **agg,
                     "entries": [{"uid": r.uid, **{c: m[c] for c in COLS}} for r, m in zip(reqs, metrics)]})
        logging.info("layer %d: reliability %.3f, action %.3f, neighbourhood %.4f", layer,
                     agg["reliability"]["mean"], agg["action_paraphrase"]["mean"],
                     agg["neighbourhood_score"]["mean"])
    lines = [f"# ROME layer sweep ({args.model})", "",
             f"{len(reqs)} broad entries ({args.limit} per framework), corpus covariance "
             f"({args.corpus or 'self-generated corpus'}), default ROME hyperparameters otherwise, "
             f"seed {args.seed}. Mean ± std over entries; neighbourhood score: lower is better.", "",
             "| Layer | " + " | ".join(COLS) + " | median s/edit |", "|---:|" + "---:|" * (len(COLS) + 1)]
    for row in rows:
        cells = [f"{row[c]['mean']:.3f} ± {row[c]['std']:.3f}" for c in COLS]
        lines.append(f"| {row['layer']} | " + " | ".join(cells) + f" | {row['median_s']:.2f} |")
    base_layer = RomeHParams().layer if RomeHParams().layer in layers else layers[0]
    ref = next(row for row in rows if row["layer"] == base_layer)
    if len(rows) > 1:
        lines += ["", f"Paired difference from layer {base_layer} (the same entries; mean [95% bootstrap CI]):",
                  "", "| Layer | " + " | ".join(COLS) + " |", "|---:|" + "---:|" * len(COLS)]
    lines += paired_difference_lines(rows, ref, COLS, args.seed, label="layer", reference={"from_layer": base_layer})
    return write_results(args, lines, rows)


if __name__ == "__main__":
    sys.exit(main())
