"""What the editing sweeps (`editing_sweep.py`, `rome_layer_sweep.py`) share: paired differences of
each variant from a reference variant over the same entries, and writing table.md and summary.json."""
from __future__ import annotations

import json
from collections.abc import Sequence


def paired_difference_lines(rows: Sequence[dict], ref: dict, cols: Sequence[str], seed: int, *,
                            label: str, reference: dict) -> list[str]:
    """A table row per variant other than `ref`: the mean paired difference from `ref` per column
    with a 95% bootstrap CI (each row also keeps it under "paired_difference", with `reference`)."""
    from sage.metrics.stats import bootstrap_mean_ci

    lines = []
    for row in rows:
        if row is ref:
            continue
        diffs = {c: bootstrap_mean_ci([a[c] - b[c] for a, b in zip(row["entries"], ref["entries"])], seed=seed)
                 for c in cols}
        row["paired_difference"] = {**reference, **{c: d.as_dict() for c, d in diffs.items()}}
        lines.append(f"| {row[label]} | " + " | ".join(diffs[c].fmt() for c in cols) + " |")
    return lines


def write_results(args, lines: list[str], rows: list[dict]) -> int:
    """`args.out`/table.md (also printed) and summary.json (the arguments, rows and provenance)."""
    from sage.provenance import provenance

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    (args.out / "summary.json").write_text(json.dumps(
        {"config": vars(args) | {"out": str(args.out)}, "rows": rows, "provenance": provenance(args.seed)},
        indent=2, default=str) + "\n")
    print("\n".join(lines))
    return 0
