"""SGE versus BLEU, ROUGE-L, BERTScore and cosine on a responses set (seed paper Table 1 layout).

Rows: the paraphrased questions themselves (a baseline: paraphrases of one question are meant to
be equivalent, so a consistency metric should rate them high), the model's answers, and its
Rules of Thumb. Columns: each metric's mean over questions with a 95% bootstrap CI.

    python experiments/sge_vs_baselines.py [--responses FILE] [--embedder ID] [--out DIR]

Default input: the SaGE authors' quality100 GPT-3.5 answers and RoTs from ../shared/data.
Writes table.md, questions.csv, summary.json (config, versions, git hash, seed) under --out.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT = REPO.parent / "shared" / "data" / "sage-quality100" / "q100_gpt_3.5_rot.csv"
METRICS = [("sge", "SGE"), ("bleu", "BLEU"), ("rouge_l", "ROUGE-L"), ("bertscore", "BERTScore"), ("cosine", "Cosine")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--responses", type=Path, default=DEFAULT)
    ap.add_argument("--embedder", default=None)
    ap.add_argument("--model-name", default=None, help="Label when the file has no model column (default: file stem).")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "sge_vs_baselines")
    args = ap.parse_args(argv)

    from sage.data.responses import read_responses
    from sage.errors import SageInputError
    from sage.metrics.similarity import SimilarityOptions
    from sage.scoring import ScoreConfig, score_responses

    try:
        df = read_responses(args.responses)
    except SageInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if (df["model"] == "model").all():
        df["model"] = args.model_name or args.responses.stem
    # The paraphrases as a third text column: score them with the same machinery as answers.
    texts = {"answer": "Answers", "rot": "RoTs"}
    if "paraphrase" in df.columns:
        para = df.assign(answer=df["paraphrase"], rot=df["paraphrase"])
    config = ScoreConfig(similarity=SimilarityOptions(embedder=args.embedder), seed=args.seed, on=("answer", "rot"))
    result = score_responses(df, config, source=str(args.responses), progress=False)
    rows = []
    summaries = {"responses": result.summary}
    if "paraphrase" in df.columns:
        para_result = score_responses(para, ScoreConfig(similarity=config.similarity, seed=args.seed, on=("answer",)),
                                      source=f"{args.responses} (paraphrases)", progress=False)
        summaries["paraphrases"] = para_result.summary
        rows.append(("Paraphrased questions", para_result.summary, "answer"))
    rows += [(label, result.summary, col) for col, label in texts.items()]

    lines = ["| Texts | " + " | ".join(label for _, label in METRICS) + " |", "|---|" + "---:|" * len(METRICS)]
    for label, summary, col in rows:
        for model, m in summary["models"].items():
            cells = []
            for metric, _ in METRICS:
                s = m["metrics"][f"{metric}_{col}"]
                cells.append(f"{s['mean']:.3f} [{s['ci_low']:.3f}, {s['ci_high']:.3f}]")
            lines.append(f"| {label} ({model}, {m['n_questions_scored']} questions) | " + " | ".join(cells) + " |")
    args.out.mkdir(parents=True, exist_ok=True)
    header = (f"# SGE versus baselines\n\nInput: `{args.responses.name}`. Mean over questions [95% bootstrap CI], "
              f"SGE edges cosine, embedder {args.embedder or 'all-MiniLM-L6-v2 (bundled)'}, seed {args.seed}.\n\n")
    (args.out / "table.md").write_text(header + "\n".join(lines) + "\n")
    result.questions.to_csv(args.out / "questions.csv", index=False)
    (args.out / "summary.json").write_text(json.dumps(summaries, indent=2, default=str) + "\n")
    print(header + "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
