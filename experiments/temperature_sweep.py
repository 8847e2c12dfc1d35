"""Consistency against sampling temperature: the same question answered repeatedly.

For each temperature, every question (the built-in demo set, or --questions FILE) is answered
`--samples` times as written (no paraphrases), so the only source of variation is sampling. The
answers are scored with SGE and the baselines per question; `table.md` and `temperature.png` show
the mean over questions with 95% bootstrap CIs. A consistency metric should fall as temperature
rises; T = 0 (greedy) repeats one answer and is the ceiling.

    python experiments/temperature_sweep.py [--model NAME] [--temperatures 0,0.3,0.7,1.0,1.3]
        [--samples 8] [--limit N] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
METRICS = [("sge", "SGE"), ("bleu", "BLEU"), ("rouge_l", "ROUGE-L"), ("bertscore", "BERTScore")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--questions", default=None, help="CSV/JSONL with question_id, question (default: demo set)")
    ap.add_argument("--temperatures", default="0,0.3,0.7,1.0,1.3")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--limit", type=int, default=None, help="first N questions")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "temperature_sweep")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    import pandas as pd

    from sage.data.questions import read_questions
    from sage.errors import SageInputError
    from sage.pipeline import PipelineConfig, generate_answers
    from sage.provenance import provenance
    from sage.scoring import score_responses

    try:
        temps = [float(t) for t in args.temperatures.split(",") if t.strip()]
        questions = read_questions(args.questions)
    except (ValueError, SageInputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.limit:
        questions = questions.head(args.limit)
    table = questions.assign(paraphrase_id=0, paraphrase=questions["question"], paraphrase_score=float("nan"))
    frames = []
    for t in temps:
        cfg = PipelineConfig.flat(model=args.model, temperature=t, samples=args.samples if t > 0 else 2,
                             answer_max_new_tokens=args.max_new_tokens, seed=args.seed,
                             out_dir=str(args.out))
        df = generate_answers(table, cfg)
        frames.append(df.assign(model=f"T={t:g}"))
    responses = pd.concat(frames, ignore_index=True)
    result = score_responses(responses, on=("answer",), metrics=tuple(m for m, _ in METRICS),
                             seed=args.seed, progress=False, skip_invalid=True)
    args.out.mkdir(parents=True, exist_ok=True)
    rows, lines = [], ["| Temperature | " + " | ".join(label for _, label in METRICS) + " |",
                       "|---:|" + "---:|" * len(METRICS)]
    for t in temps:
        m = result.summary["models"][f"T={t:g}"]["metrics"]
        stats = {metric: m[f"{metric}_answer"] for metric, _ in METRICS}
        rows.append({"temperature": t, **{k: v["mean"] for k, v in stats.items()},
                     **{f"{k}_ci": [v["ci_low"], v["ci_high"]] for k, v in stats.items()}})
        lines.append(f"| {t:g} | " + " | ".join(
            f"{s['mean']:.3f} [{s['ci_low']:.3f}, {s['ci_high']:.3f}]" for s in stats.values()) + " |")
    header = (f"# Consistency against sampling temperature\n\nModel `{args.model}`, {len(questions)} questions "
              f"answered {args.samples} times each at T > 0 (twice at T = 0: greedy repeats itself), "
              f"{args.max_new_tokens} new tokens, seed {args.seed}. Mean over questions [95% bootstrap CI].\n\n")
    (args.out / "table.md").write_text(header + "\n".join(lines) + "\n")
    result.questions.to_csv(args.out / "questions.csv", index=False)
    (args.out / "summary.json").write_text(json.dumps(
        {"config": vars(args) | {"out": str(args.out)}, "rows": rows, "provenance": provenance(args.seed)},
        indent=2, default=str) + "\n")
    _figure(rows, args.out / "temperature.png", args.model)
    print(header + "\n".join(lines))
    return 0


def _figure(rows, path: Path, model: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=120)
    temps = [r["temperature"] for r in rows]
    for metric, label in METRICS:
        lo = [r[metric] - r[f"{metric}_ci"][0] for r in rows]
        hi = [r[f"{metric}_ci"][1] - r[metric] for r in rows]
        ax.errorbar(temps, [r[metric] for r in rows], yerr=[lo, hi], marker="o", capsize=3, label=label)
    ax.set_xlabel("sampling temperature")
    ax.set_ylabel("consistency (mean over questions)")
    ax.set_title(f"Consistency vs temperature ({model})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
