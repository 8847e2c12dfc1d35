#!/usr/bin/env bash
# Install Label Studio into its own virtualenv so it cannot change the project's packages.
# The slow/server test `tests/test_annotation_labelstudio.py` finds it through SAGE_LABEL_STUDIO
# (path to the `label-studio` executable) or at the default location used here.
#
#   scripts/install_label_studio.sh            # -> ~/.cache/sage-label-studio-venv
#   SAGE_LABEL_STUDIO_VENV=/opt/ls scripts/install_label_studio.sh
set -euo pipefail

VENV="${SAGE_LABEL_STUDIO_VENV:-${HOME}/.cache/sage-label-studio-venv}"
VERSION="${SAGE_LABEL_STUDIO_VERSION:-}"   # e.g. 1.23.0; empty = newest
PYTHON="${PYTHON:-python3}"

if [ -x "${VENV}/bin/label-studio" ]; then
    echo "label-studio already installed: ${VENV}/bin/label-studio"
    exit 0
fi
"${PYTHON}" -m venv "${VENV}"
"${VENV}/bin/python" -m pip install --quiet --upgrade pip
# sentry-sdk 3 removed the `send_default_pii` option that Label Studio passes at startup (it then exits).
if [ -n "${VERSION}" ]; then
    "${VENV}/bin/python" -m pip install --quiet "label-studio==${VERSION}" "sentry-sdk<3"
else
    "${VENV}/bin/python" -m pip install --quiet label-studio "sentry-sdk<3"
fi
# `label-studio --version` looks for newer releases online; import the package instead.
"${VENV}/bin/python" -c "import label_studio, sys; sys.stdout.write('label-studio ' + label_studio.__version__ + chr(10))"
echo "installed: ${VENV}/bin/label-studio"
echo "export SAGE_LABEL_STUDIO=${VENV}/bin/label-studio"
