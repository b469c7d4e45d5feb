#!/usr/bin/env bash
# Installs the Debian packages that building, testing and the demo need.
# Idempotent: installs only what is missing; uses sudo only when not root.
#   scripts/bootstrap.sh        the packages of build, test and run
#   scripts/bootstrap.sh fuzz   those plus clang and its compiler-rt (libFuzzer,
#                               sanitizer runtimes) for `make fuzz`
set -euo pipefail

PKGS=(build-essential cmake pkg-config git ca-certificates
      libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev liblmdb-dev lmdb-utils libcmocka-dev libvlfeat-dev
      libmicrohttpd-dev libjansson-dev openssl   # openssl: test_serve's TLS certificate
      python3-numpy python3-skimage python3-venv python3-pytest python3-setuptools
      chromium chromium-driver python3-selenium)   # the last three: the web UI's browser tests
# bench/serve/run.sh also needs wrk (PATINA_BOOTSTRAP_EXTRA=wrk, or the script installs it)
if [ "${1:-}" = fuzz ]; then PKGS+=(clang libclang-rt-dev); fi
# Optional extras: PATINA_BOOTSTRAP_EXTRA="valgrind" scripts/bootstrap.sh
if [ -n "${PATINA_BOOTSTRAP_EXTRA:-}" ]; then read -r -a extra <<<"$PATINA_BOOTSTRAP_EXTRA"; PKGS+=("${extra[@]}"); fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "bootstrap: all ${#PKGS[@]} packages present"
  exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "bootstrap: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=(sudo)
fi
echo "bootstrap: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
