#!/bin/bash
# Set-up for the identification accuracy benchmark (bench/identify, issue 15): the Debian tools the
# data recipes need (unzip, imagemagick) and a Python venv (.venv-identify at the repository root,
# gitignored) with the packages make_sets.py, the OpenCV peer and score.py (matplotlib: its plots) import,
# from PyPI.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${VENV:-$ROOT/.venv-identify}
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
need=()
command -v unzip >/dev/null || need+=(unzip)
command -v identify >/dev/null || need+=(imagemagick)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then $SUDO apt-get install -y "${need[@]}"; fi
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -c 'import numpy, cv2, skimage, PIL, matplotlib' 2>/dev/null ||
  "$VENV/bin/pip" install -q opencv-python-headless numpy scikit-image Pillow matplotlib
"$VENV/bin/python" -c 'import numpy, cv2, skimage, matplotlib; print("venv", "'"$VENV"'", "numpy", numpy.__version__, "opencv", cv2.__version__, "scikit-image", skimage.__version__, "matplotlib", matplotlib.__version__)'
