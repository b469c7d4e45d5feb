#!/bin/bash
# The OpenCV contrib peer of the `signature` family (issue 18): a Python venv (.venv-peers at the
# repository root, gitignored) with numpy and opencv-contrib-python-headless from PyPI, whose
# cv2.xfeatures2d has PCTSignatures and PCTSignaturesSQFD. tests/test_signature_opencv.c uses it
# (and skips with a message when it is missing); `make test` runs this script first.
# Idempotent: installs only what is missing. VENV overrides the location.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${VENV:-$ROOT/.venv-peers}
# python3-venv comes from scripts/bootstrap.sh (Debian's package).
python3 -c 'import venv, ensurepip' 2>/dev/null || { echo "setup-opencv: python3-venv is missing (scripts/bootstrap.sh)" >&2; exit 1; }
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -c 'import numpy, cv2; cv2.xfeatures2d.PCTSignaturesSQFD_create' 2>/dev/null ||
  "$VENV/bin/pip" install -q numpy opencv-contrib-python-headless
"$VENV/bin/python" -c 'import numpy, cv2; cv2.xfeatures2d.PCTSignatures_create; print("peers venv", "'"$VENV"'", "numpy", numpy.__version__, "opencv", cv2.__version__)'
