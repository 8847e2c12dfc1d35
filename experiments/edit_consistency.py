"""The edit-consistency study (`sage study edit-consistency`) as a reproducible experiment.

Default: ROME, LoRA, IKE and MEMIT applied to all chosen entries in one batch, on the bundled
model, the first `--limit` broad entries per framework (all 120 broad entries with --limit 0).
Writes summary.md, changes.csv, scores.csv, summary.json and config.json (versions, git hash)
under experiments/results/edit_consistency/; per-entry generations stream to records/ and a
rerun resumes.

    python experiments/edit_consistency.py [--model NAME] [--methods rome,lora,ike,memit:batch]
        [--limit 5] [--out DIR]
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--methods", default="rome,lora,ike,memit:batch")
    ap.add_argument("--limit", type=int, default=5, help="entries per framework; 0 = all")
    ap.add_argument("--k", type=int, default=5, help="paraphrases of the open question")
    ap.add_argument("--data", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "edit_consistency")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    from sage.editing.dataset import default_data_dir
    from sage.errors import SageInputError
    from sage.studies.edit_consistency import StudyConfig, run_study

    try:
        cfg = StudyConfig(methods=tuple(m.strip() for m in args.methods.split(",") if m.strip()),
                          limit=args.limit or None, model=args.model, k=args.k, out=str(args.out),
                          data=str(args.data or default_data_dir()), seed=args.seed)
        run_study(cfg)
    except SageInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print((args.out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
