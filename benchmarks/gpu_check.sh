#!/usr/bin/env bash
# One short check on a CUDA GPU (at most about 8 minutes on one GPU with the bundled model):
#   1. the vLLM backend on CUDA in bfloat16 and float16, and ROME / MEMIT edits on CUDA in float32 and
#      bfloat16 with bit-exact restore, and a 3-edit sequential MEMIT run (tests/test_gpu.py, marker gpu);
#   2. one ROME and one MEMIT edit through `sage edit --device cuda`;
#   3. the scoring benchmark's ratio against the per-pair reference on CUDA.
# Writes benchmarks/results/gpu_check.json (each step's exit status, seconds and last lines).
#
#   benchmarks/gpu_check.sh [--dry-run] [--out FILE] [--budget-s SECONDS]
# --dry-run prints the steps and checks the arguments; it needs no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=benchmarks/results/gpu_check.json
BUDGET=480
DRY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --out) [ $# -ge 2 ] || { echo "error: --out needs a file name" >&2; exit 2; }; OUT=$2; shift ;;
    --budget-s) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || { echo "error: --budget-s needs whole seconds" >&2; exit 2; }
                BUDGET=$2; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

WORK=$(mktemp -d)
STEPS=(
  "gpu-tests|$PY -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py"
  "sage-edit-rome|$PY -m sage edit --method rome --limit 1 --device cuda --out $WORK/rome"
  "sage-edit-memit|$PY -m sage edit --method memit --limit 1 --device cuda --out $WORK/memit"
  "scoring-benchmark|$PY benchmarks/bench_scoring.py --device cuda --repeats 1 --sample-questions 3 --backends torch --json $WORK/scoring.json"
)
if [ "$DRY" = 1 ]; then
  echo "gpu check (dry run): $((${#STEPS[@]})) steps, budget ${BUDGET} s, results to $OUT"
  for s in "${STEPS[@]}"; do echo "  ${s%%|*}: ${s#*|}"; done
  rm -rf "$WORK"
  exit 0
fi
$PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
  || { echo "error: no CUDA GPU visible to torch; use --dry-run to check the steps" >&2; exit 2; }

: > "$WORK/steps.tsv"
start=$(date +%s)
for s in "${STEPS[@]}"; do
  name=${s%%|*}; cmd=${s#*|}
  left=$((BUDGET - ($(date +%s) - start)))
  if [ "$left" -le 0 ]; then echo -e "$name\tskipped\t0\tbudget spent" >> "$WORK/steps.tsv"; continue; fi
  echo "== $name (${left} s left): $cmd"
  t0=$(date +%s)
  set +e
  timeout "$left" bash -c "$cmd" > "$WORK/$name.log" 2>&1
  rc=$?
  set -e
  echo -e "$name\t$rc\t$(( $(date +%s) - t0 ))\t$WORK/$name.log" >> "$WORK/steps.tsv"
  tail -3 "$WORK/$name.log"
done
mkdir -p "$(dirname "$OUT")"
$PY - "$WORK" "$OUT" <<'PY'
import json, sys
from pathlib import Path
from sage.provenance import provenance
import torch
work, out = Path(sys.argv[1]), Path(sys.argv[2])
steps = []
for line in (work / "steps.tsv").read_text().splitlines():
    name, rc, secs, log = line.split("\t")
    tail = Path(log).read_text(errors="replace").splitlines()[-15:] if Path(log).is_file() else [log]
    steps.append({"step": name, "exit_status": rc, "seconds": int(secs), "tail": tail})
scoring = work / "scoring.json"
result = {"gpu": torch.cuda.get_device_name(0), "steps": steps, **provenance(),
          "scoring": json.loads(scoring.read_text()) if scoring.is_file() else None,
          "passed": all(s["exit_status"] == "0" for s in steps)}
out.write_text(json.dumps(result, indent=2) + "\n")
print(f"wrote {out}: {'all steps passed' if result['passed'] else 'some steps failed'}")
PY
rm -rf "$WORK"
