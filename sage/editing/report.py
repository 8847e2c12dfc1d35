"""Markdown tables laid out like the CounterMoral paper: Table 1 (broad actions), Table 2 (specific
actions), Table 4 (batch editing); rows = method x framework, columns = reliability, action and
relation paraphrase generalization, neighbourhood score, with the published GPT2-XL numbers side by
side where `published-results-gpt2-xl/` is present.
"""
from __future__ import annotations

import json
from pathlib import Path

from sage.editing.dataset import FRAMEWORKS

COLUMNS = (("reliability", "reliability"), ("action_paraphrase", "generalization_action_paraphrase"),
           ("relation_paraphrase", "generalization_relation_paraphrase"),
           ("neighbourhood_score", "neighbourhood_score"))
TABLES = (("Table 1: broad actions", "broad", False, "broad-actions"),
          ("Table 2: specific actions", "specific", False, "all-actions"),
          ("Table 4: batch editing (all entries of a subset at once)", None, True, None))


def published(data_dir: Path | None, method: str) -> dict | None:
    if data_dir is None:
        return None
    path = Path(data_dir) / "published-results-gpt2-xl" / f"{method}.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())["results"]
    except (json.JSONDecodeError, KeyError):
        return None


def _cell(stat: dict | None) -> str:
    return "–" if not stat else f"{stat['mean']:.3f} ± {stat['std']:.3f}"


def tables(out_dir: Path, data_dir: Path | None) -> str:
    summaries = [json.loads(p.read_text()) for p in sorted(Path(out_dir).glob("*/*/summary.json"))]
    parts = ["# CounterMoral editing results\n",
             "Ours: mean ± std over entries. GPT2-XL: the authors' published AGS numbers (their "
             "neighbourhood score used the last sub-token without a leading space, so it is near 0).\n"]
    for title, subset, batch, pub_key in TABLES:
        rows = [s for s in summaries if s["batch"] == batch and (subset is None or s["subset"] == subset)]
        if not rows:
            continue
        head = ["Method", "Framework"] + [f"{c} (ours)" for c, _ in COLUMNS]
        head += [f"{c} (GPT2-XL)" for c, _ in COLUMNS] if pub_key else []
        parts += [f"\n## {title}\n", "| " + " | ".join(head) + " |",
                  "|" + "---|" * len(head)]
        for s in rows:
            pub = published(data_dir, s["method"]) if pub_key else None
            fws = [fw for fw in FRAMEWORKS if fw in s["frameworks"]] + ["overall"]
            for fw in fws:
                stats = s["overall"] if fw == "overall" else s["frameworks"][fw]
                cells = [s["method"] + (f" ({s['subset']})" if subset is None else ""), fw]
                cells += [_cell(stats.get(c)) for c, _ in COLUMNS]
                if pub_key:
                    ref = (pub or {}).get(fw.upper(), {}).get(pub_key, {}).get("edited", {}).get("AGS")
                    cells += [_cell(ref.get(p)) if ref else "–" for _, p in COLUMNS]
                parts.append("| " + " | ".join(cells) + " |")
    return "\n".join(parts) + "\n"


def write_tables(out_dir: Path, data_dir: Path | None) -> Path:
    path = Path(out_dir) / "tables.md"
    path.write_text(tables(out_dir, data_dir))
    return path
