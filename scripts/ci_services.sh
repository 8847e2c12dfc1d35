#!/usr/bin/env bash
# Services and tools the test suite uses beyond the Python packages: Debian's Chromium (the HTML
# report is rendered headless in a test) and Label Studio in its own virtualenv (a real annotation
# round trip). Both are idempotent: already-installed pieces are kept.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium >/dev/null
fi
chromium --version || true

bash scripts/install_label_studio.sh
