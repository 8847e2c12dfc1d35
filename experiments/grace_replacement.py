"""GRACE's replacement rule on the broad subset: ours (`from_key`: the layer's output replaced from
the key token on) against EasyEdit's `replace_last` (only the key token's output), paired by entry.

Reads our committed broad run (`experiments/results/countermoral/grace/broad/`) and a `replace_last`
run over the same entries (all 120), made with

    echo '{"grace": {"replacement": "replace_last"}}' > replace_last.json
    sage edit --method grace --subset broad --hparams replace_last.json
        --out experiments/results/countermoral_grace_replace_last

and writes `comparison.md` beside the latter: mean per measure over the entries both runs hold, the
paired difference and its Wilcoxon signed-rank p (scipy's default: zero differences dropped).

    python experiments/grace_replacement.py [--ours DIR] [--theirs DIR]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy import stats

REPO = Path(__file__).resolve().parents[1]
MEASURES = ("reliability", "action_paraphrase", "relation_paraphrase", "neighbourhood_dlogp",
            "neighbourhood_success", "neighbourhood_new_rise", "locality", "routed_edit", "routed_action",
            "routed_relation", "routed_neighbour", "post_p_new", "edit_seconds")


def compare(ours: Path, theirs: Path) -> str:
    from sage.data.records import RecordStore

    a = RecordStore(ours / "entries.jsonl", key_field="uid").records
    b = RecordStore(theirs / "entries.jsonl", key_field="uid").records
    uids = [u for u in b if u in a]
    lines = [f"# GRACE: `from_key` (ours) against `replace_last` (EasyEdit), {len(uids)} broad entries", "",
             f"Ours: `{ours.relative_to(REPO)}`; replace_last: `{theirs.relative_to(REPO)}`. Paired by entry; "
             "p: Wilcoxon signed-rank (zero differences dropped).", "",
             "| measure | from_key (ours) | replace_last | difference | p |", "|---|---:|---:|---:|---:|"]
    for m in MEASURES:
        pairs = [(a[u][m], b[u][m]) for u in uids if m in a[u] and m in b[u]]
        if not pairs:
            continue
        x, y = np.array(pairs, dtype=float).T
        d = x - y
        p = stats.wilcoxon(x, y).pvalue if np.any(d != 0) else float("nan")
        lines.append(f"| {m} | {x.mean():.3f} | {y.mean():.3f} | {d.mean():+.3f} | {p:.2g} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ours", type=Path, default=REPO / "experiments/results/countermoral/grace/broad")
    ap.add_argument("--theirs", type=Path,
                    default=REPO / "experiments/results/countermoral_grace_replace_last/grace/broad")
    args = ap.parse_args(argv)
    text = compare(args.ours, args.theirs)
    (args.theirs.parent.parent / "comparison.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
