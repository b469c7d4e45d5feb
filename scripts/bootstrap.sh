#!/usr/bin/env bash
# Installs the Debian packages a make target needs, and only those.
# Idempotent: installs only what is missing; uses sudo only when not root.
#   scripts/bootstrap.sh run    building the library and the CLI (with
#                               `patina serve`), the demo (`make run`)
#   scripts/bootstrap.sh test   those plus what the test suite uses (`make test`):
#                               cmocka, Python with numpy/scikit-image/pytest,
#                               the venv and wheel tools for the binding's
#                               install test, openssl, and Chromium with
#                               Selenium for the web UI's browser tests
#   scripts/bootstrap.sh fuzz   run's plus clang and its compiler-rt (libFuzzer,
#                               sanitizer runtimes) for `make fuzz`
# Without an argument: test (everything but fuzz). README.md lists the sets.
# apt-get's output goes to a log file, named when it fails.
set -euo pipefail

RUN=(build-essential cmake pkg-config
     libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev liblmdb-dev libvlfeat-dev
     libmicrohttpd-dev libjansson-dev     # `patina serve`
     libavformat-dev libavcodec-dev libswscale-dev libavutil-dev)   # video files (FFmpeg)
TEST=(libcmocka-dev openssl              # openssl: test_serve's TLS certificate
      python3-numpy python3-skimage python3-pytest
      python3-venv python3-setuptools python3-wheel ca-certificates  # pip install of the binding; the OpenCV peer's venv from PyPI
      chromium chromium-driver python3-selenium)   # the web UI's browser tests
set_name=${1:-test}
case $set_name in
run) PKGS=("${RUN[@]}") ;;
test) PKGS=("${RUN[@]}" "${TEST[@]}") ;;
fuzz) PKGS=("${RUN[@]}" clang libclang-rt-dev) ;;
*) echo "usage: scripts/bootstrap.sh [run|test|fuzz]" >&2; exit 2 ;;
esac
# bench/serve/run.sh also needs wrk (PATINA_BOOTSTRAP_EXTRA=wrk, or the script installs it)
# Optional extras: PATINA_BOOTSTRAP_EXTRA="valgrind" scripts/bootstrap.sh
if [ -n "${PATINA_BOOTSTRAP_EXTRA:-}" ]; then read -r -a extra <<<"$PATINA_BOOTSTRAP_EXTRA"; PKGS+=("${extra[@]}"); fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "bootstrap: the ${#PKGS[@]} Debian packages of '$set_name' are installed"
  exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "bootstrap: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=(sudo)
fi
log=$(mktemp "${TMPDIR:-/tmp}/patina-bootstrap.XXXXXX")
echo "bootstrap: installing ${#missing[@]} Debian packages for '$set_name': ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! { "${SUDO[@]}" apt-get update -q && \
       "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  echo "bootstrap: apt-get failed; its output: $log" >&2
  exit 1
fi
rm -f "$log"
