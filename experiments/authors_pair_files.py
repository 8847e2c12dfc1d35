"""SGE on the SaGE authors' released pair files: GPT-3.5 (quality100) and Vicuna-7B-v1.5.

Each file is in the authors' pair layout (one row per answer pair); `sage` rebuilds the nodes and
scores them twice: with the authors' own similarity column (`cosine_model_output`, their
stsb-distilroberta-base-v2 encoder, unavailable offline) as SGE edges, and with the bundled
all-MiniLM-L6-v2 cosine, beside BLEU, ROUGE-L, BERTScore and mean cosine.

    python experiments/authors_pair_files.py [--data DIR] [--out DIR]

Default data: ../shared/data (or SAGE_SHARED_DATA); `sage data download` fetches the same files.
Writes table.md, questions_<file>.csv and summary.json (config, versions, git hash, seed).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SAGE_SHARED_DATA", REPO.parent / "shared" / "data"))
FILES = [("GPT-3.5 (quality100)", "sage-quality100/q100_gpt_3.5_edges.csv"),
         ("Vicuna-7B-v1.5 (set 0)", "sage-responses/vicuna-7b-v1.5_0.csv"),
         ("Vicuna-7B-v1.5 (set 1)", "sage-responses/vicuna-7b-v1.5_1.csv"),
         ("Vicuna-7B-v1.5 (set 3)", "sage-responses/vicuna-7b-v1.5_3.csv")]
COLUMNS = [("sge", "SGE (authors' stsb cosine)"), ("sge_cosine", "SGE (MiniLM cosine)"), ("bleu", "BLEU"),
           ("rouge_l", "ROUGE-L"), ("bertscore", "BERTScore"), ("cosine", "Cosine (MiniLM)")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "authors_pair_files")
    args = ap.parse_args(argv)

    from sage.errors import SageInputError
    from sage.provenance import provenance
    from sage.scoring import ScoreConfig, score_responses

    args.out.mkdir(parents=True, exist_ok=True)
    lines = ["| Model | Texts | Questions | " + " | ".join(label for _, label in COLUMNS) + " |",
             "|---|---|---:|" + "---:|" * len(COLUMNS)]
    summaries = {}
    for label, rel in FILES:
        path = args.data / rel
        # Answers: the authors' answer column as SGE edges; RoTs: theirs is 0.8 * answer cosine +
        # 0.2 * RoT cosine (see ../shared/data/README.md), not a RoT similarity, so none is used.
        for col, edge in (("answer", "column:cosine_model_output"), ("rot", None)):
            edges = (edge, "cosine") if edge else ("cosine",)
            config = ScoreConfig(on=(col,), sge_edges=edges, seed=args.seed)
            try:
                result = score_responses(path, config, progress=False)
            except SageInputError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            m = result.summary["models"]["model"]
            summaries[f"{rel}:{col}"] = result.summary
            result.questions.to_csv(args.out / f"questions_{Path(rel).stem}_{col}.csv", index=False)
            cells = []
            for key, _ in COLUMNS:
                name = {"sge": f"sge_{col}" if edge else None,
                        "sge_cosine": f"sge_cosine_{col}" if edge else f"sge_{col}"}.get(key, f"{key}_{col}")
                s = m["metrics"].get(name) if name else None
                cells.append("n/a" if not s or not s["n"] else f"{s['mean']:.3f} [{s['ci_low']:.3f}, {s['ci_high']:.3f}]")
            lines.append(f"| {label} | {'answers' if col == 'answer' else 'RoTs'} | {m['n_questions_scored']} | "
                         + " | ".join(cells) + " |")
    header = ("# SGE on the SaGE authors' released pair files\n\nMean over questions [95% bootstrap CI, 2000 "
              f"resamples, seed {args.seed}]. SGE (authors' stsb cosine): the files' `cosine_model_output` "
              "column as edges. BERTScore: MiniLM layer 6.\n\n")
    (args.out / "table.md").write_text(header + "\n".join(lines) + "\n")
    (args.out / "summary.json").write_text(json.dumps({"runs": summaries, "provenance": provenance(args.seed)},
                                                      indent=2, default=str) + "\n")
    print(header + "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
