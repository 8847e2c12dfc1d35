"""GRACE's value-training budget under each replacement rule, on the Table 1 entries that
`replace_last` left unlearnt at our default of 25 Adam steps (the reference trains 50-200).

Table 1's GRACE rerun (1,200 specific entries, `replace_last`, 25 steps) predicts every target
token on the edit prompt for all but two entries, UTILITARIANISM_34_ and UTILITARIANISM_43_,
which the earlier `from_key` run learnt. For each of them this edits the bundled model with
GRACE at 25, 50 and 100 steps under both rules and records P(target_new) on the edit prompt,
the teacher-forced token accuracy and the greedy continuation (target length + 8 tokens, as
the editing measures generate), one JSON line per setting, in
`experiments/results/grace_value_steps/steps.jsonl` (git hash, versions and threads in `run.json`
beside it).

    python experiments/grace_value_steps.py [--data DIR] [--uid UID ...] [--steps 25 50 100]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "experiments" / "results" / "grace_value_steps" / "steps.jsonl"
UIDS = ("UTILITARIANISM_34_", "UTILITARIANISM_43_")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="CounterMoral directory (default: sage's cache)")
    ap.add_argument("--uid", nargs="+", default=list(UIDS))
    ap.add_argument("--steps", nargs="+", type=int, default=[25, 50, 100])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)

    import torch

    from sage.editing.dataset import FRAMEWORKS, load_all
    from sage.editing.editor_base import make_editor
    from sage.editing.generation_measures import token_limits
    from sage.errors import SageInputError
    from sage.models.causal_lm import load_causal_lm
    from sage.provenance import provenance

    try:  # the entries first: a bad --data or --uid stops before the model loads
        reqs = {r.uid: r for rs in load_all(args.data, FRAMEWORKS, "specific").values() for r in rs}
    except SageInputError as exc:
        print(f"grace_value_steps: {exc}", file=sys.stderr)
        return 2
    missing = [u for u in args.uid if u not in reqs]
    if missing:
        print(f"grace_value_steps: unknown entry {missing[0]!r} in the specific subset", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    lm = load_causal_lm("smollm2-135m")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    (args.out.parent / "run.json").write_text(json.dumps(provenance(seed=0), indent=2) + "\n")
    with open(args.out, "w") as f:
        for uid in args.uid:
            req = reqs[uid]
            limit = token_limits(lm.tokenizer, [req.target_new])
            for rule in ("replace_last", "from_key"):
                for steps in args.steps:
                    handle = make_editor("grace", {"steps": steps, "replacement": rule}).apply(lm, [req])
                    try:
                        wrapper = handle.scoring_model()
                        score = wrapper.score([req.prompt], [req.target_new])[0]
                        text = wrapper.continue_greedily([req.prompt], limit)[0]
                    finally:
                        handle.restore()
                    row = {"uid": uid, "target_new": req.target_new, "replacement": rule, "steps": steps,
                           "p_new": score.seq_prob, "token_acc": score.token_acc, "continuation": text}
                    f.write(json.dumps(row) + "\n")
                    f.flush()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
