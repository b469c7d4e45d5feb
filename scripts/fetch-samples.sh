#!/usr/bin/env bash
# Real sample photographs from Debian packages, for the demo, the tests and
# the benchmarks. Packages are downloaded (apt-get download) and unpacked
# (dpkg -x), never installed; nothing third-party is committed.
#   samples/mate/        nature photographs (mate-backgrounds, JPEG)
#   samples/kphotoalbum/ demo photographs (kphotoalbum, JPEG)
#   samples/opencv/      the example images of opencv-doc (JPEG and PNG)
# Usage: scripts/fetch-samples.sh [DEST]   (default: samples/ in the repo)
# Downloads are cached in ${PATINA_CACHE:-$HOME/.cache/patina}.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-$here/samples}
CACHE=${PATINA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/patina}
mkdir -p "$CACHE/debs" "$CACHE/root" "$DEST"
chmod 777 "$CACHE/debs" 2>/dev/null || true   # apt's _apt user writes here

PKGS=(mate-backgrounds kphotoalbum opencv-doc)
need=()
for p in "${PKGS[@]}"; do ls "$CACHE"/debs/"${p}"_*.deb >/dev/null 2>&1 || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
  if ! (cd "$CACHE/debs" && apt-get download -q "${need[@]}"); then
    echo "fetch-samples: apt-get download failed; trying 'apt-get update' first" >&2
    if [ "$(id -u)" -eq 0 ]; then apt-get update -q; else sudo apt-get update -q; fi
    (cd "$CACHE/debs" && apt-get download -q "${need[@]}")
  fi
fi
for p in "${PKGS[@]}"; do
  [ -d "$CACHE/root/$p" ] || dpkg -x "$CACHE"/debs/"${p}"_*.deb "$CACHE/root/$p"
done

copy() {  # copy DESTSUB FILE...
  local sub=$1; shift
  mkdir -p "$DEST/$sub"
  for f in "$@"; do [ -f "$f" ] && cp -p "$f" "$DEST/$sub/"; done
}
R=$CACHE/root
copy mate "$R"/mate-backgrounds/usr/share/backgrounds/mate/nature/*.jpg
copy kphotoalbum $(find "$R"/kphotoalbum/usr/share/kphotoalbum/demo -maxdepth 1 -type f -name '*.jpg' ! -name qt-logo.jpg)
O=$R/opencv-doc/usr/share/doc/opencv-doc/examples/data   # every top-level photo/test image
copy opencv $(find "$O" -maxdepth 1 -type f \( -name '*.jpg' -o -name '*.png' \) | sort)
# Exact duplicates (same bytes under two names) would make rankings ambiguous: keep the first.
find "$DEST" -type f -print0 | sort -z | xargs -0 sha256sum | awk 'seen[$1]++ {sub(/^[^ ]+  /, ""); print}' |
  while IFS= read -r f; do rm -f "$f"; done
n=$(find "$DEST" -type f | wc -l)
echo "fetch-samples: $n images under $DEST"
