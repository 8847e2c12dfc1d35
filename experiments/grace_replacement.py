"""GRACE's replacement rule on the broad subset: EasyEdit's `replace_last` (only the key token's
layer output replaced; our default since 2026-12-05) against `from_key` (the output replaced from
the key token on; our default before, now an option), paired by entry.

Reads the committed broad run (`experiments/results/countermoral/grace/broad/`, replace_last) and a
`from_key` run over the same entries (all 120), made with

    echo '{"grace": {"replacement": "from_key"}}' > from_key.json
    sage edit --method grace --subset broad --hparams from_key.json
        --out experiments/results/countermoral_grace_from_key

and writes `comparison.md` beside the latter: mean per measure over the entries both runs hold, the
paired difference and its Wilcoxon signed-rank p (scipy's default: zero differences dropped). Each
run's rule is read from its `settings.json`.

    python experiments/grace_replacement.py [--default DIR] [--option DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats

REPO = Path(__file__).resolve().parents[1]
MEASURES = ("reliability", "action_paraphrase", "relation_paraphrase", "neighbourhood_dlogp",
            "neighbourhood_success", "neighbourhood_new_rise", "locality", "routed_edit", "routed_action",
            "routed_relation", "routed_neighbour", "post_p_new",
            # evaluation by generation (issue 32 §4): what the edited model says, not only ranks first
            "reliability_gen", "action_paraphrase_gen", "relation_paraphrase_gen", "neighbourhood_gen",
            "edit_seconds")


def _rule(run: Path) -> str:
    hp = json.loads((run / "settings.json").read_text())["hparams"]
    return hp.get("replacement", "from_key")  # runs made before the option existed replaced from_key


def compare(default: Path, option: Path) -> str:
    from sage.data.records import RecordStore

    a = RecordStore(default / "entries.jsonl", key_field="uid").records
    b = RecordStore(option / "entries.jsonl", key_field="uid").records
    uids = [u for u in b if u in a]
    ra, rb = _rule(default), _rule(option)
    lines = [f"# GRACE: `{ra}` (default) against `{rb}`, {len(uids)} broad entries", "",
             f"`{ra}`: `{default.relative_to(REPO)}`; `{rb}`: `{option.relative_to(REPO)}`. Paired by entry; "
             "p: Wilcoxon signed-rank (zero differences dropped). `_gen` measures: greedy continuation "
             "begins with the target (issue 32 §4).", "",
             f"| measure | {ra} | {rb} | difference | p |", "|---|---:|---:|---:|---:|"]
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
    ap.add_argument("--default", type=Path, default=REPO / "experiments/results/countermoral/grace/broad")
    ap.add_argument("--option", type=Path,
                    default=REPO / "experiments/results/countermoral_grace_from_key/grace/broad")
    args = ap.parse_args(argv)
    text = compare(args.default, args.option)
    (args.option.parent.parent / "comparison.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
