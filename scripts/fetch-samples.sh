#!/usr/bin/env bash
# Real sample photographs from Debian packages, for the demo, the tests and
# the benchmarks. Packages are downloaded (apt-get download) and unpacked
# (dpkg-deb), never installed; nothing third-party is committed.
#   samples/mate/        nature photographs (mate-backgrounds, JPEG)
#   samples/kphotoalbum/ demo photographs (kphotoalbum, JPEG)
#   samples/opencv/      the example images of opencv-doc (JPEG and PNG)
# Usage: scripts/fetch-samples.sh [DEST]   (default: samples/ in the repo)
# The three .deb files (about 155 MB) are kept in a private folder (0700),
# ${PATINA_CACHE:-${XDG_CACHE_HOME:-~/.cache}/patina}, so that the samples
# can be made again offline; `rm -rf ~/.cache/patina` removes them. Nothing
# else is kept there: the images are unpacked into a temporary folder, copied
# to DEST (about 18 MB) and the rest deleted. A DEST that is complete (its
# three folders present) is left as it is.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-$here/samples}
CACHE=${PATINA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/patina}
SUBS=(mate kphotoalbum opencv)

complete=1
for s in "${SUBS[@]}"; do [ -d "$DEST/$s" ] || complete=0; done
if [ $complete = 1 ]; then
  echo "fetch-samples: $(find "$DEST" -type f | wc -l) images under $DEST (already there)"
  exit 0
fi

mkdir -p "$CACHE/debs"
chmod 0700 "$CACHE/debs"   # ours alone (apt-get download writes as the caller, below)
PKGS=(mate-backgrounds kphotoalbum opencv-doc)
need=()
for p in "${PKGS[@]}"; do ls "$CACHE"/debs/"${p}"_*.deb >/dev/null 2>&1 || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
  # As root, apt-get downloads as its sandbox user _apt, who may not write
  # into a private folder: download as root instead (what apt falls back to,
  # with a warning, anyway). Another user downloads as itself.
  APT=(apt-get)
  if [ "$(id -u)" -eq 0 ]; then APT+=(-o APT::Sandbox::User=root); fi
  log=$(mktemp "${TMPDIR:-/tmp}/patina-fetch-samples.XXXXXX")
  echo "fetch-samples: downloading ${need[*]} (about 155 MB in all) into $CACHE/debs"
  if ! (cd "$CACHE/debs" && "${APT[@]}" download -q "${need[@]}") >"$log" 2>&1; then
    echo "fetch-samples: apt-get download failed; trying 'apt-get update' first" >>"$log"
    if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo); fi
    if ! { "${SUDO[@]}" apt-get update -q && (cd "$CACHE/debs" && "${APT[@]}" download -q "${need[@]}"); } \
         >>"$log" 2>&1; then
      tail -n 20 "$log" >&2
      echo "fetch-samples: download failed; apt-get's output: $log" >&2
      exit 1
    fi
  fi
  rm -f "$log"
fi

# Unpacked in a temporary folder; the copies gathered beside DEST (the same
# file system), so that each of its folders appears complete or not at all.
mkdir -p "$DEST"
work=$(mktemp -d "${TMPDIR:-/tmp}/patina-samples.XXXXXX")
part=$(mktemp -d "$DEST.partial.XXXXXX")
trap 'rm -rf "$work" "$part"' EXIT
R=$work/root
unpack() {  # unpack PACKAGE PATH-IN-PACKAGE: only that folder
  mkdir -p "$R/$1"
  dpkg-deb --fsys-tarfile "$CACHE"/debs/"$1"_*.deb | tar -x -C "$R/$1" --wildcards "./$2/*"
}
copy() {  # copy DESTSUB FILE...
  local sub=$1; shift
  mkdir -p "$part/$sub"
  for f in "$@"; do [ -f "$f" ] && cp -p "$f" "$part/$sub/"; done
}
unpack mate-backgrounds usr/share/backgrounds/mate/nature
unpack kphotoalbum usr/share/kphotoalbum/demo
unpack opencv-doc usr/share/doc/opencv-doc/examples/data
copy mate "$R"/mate-backgrounds/usr/share/backgrounds/mate/nature/*.jpg
# shellcheck disable=SC2046
copy kphotoalbum $(find "$R"/kphotoalbum/usr/share/kphotoalbum/demo -maxdepth 1 -type f -name '*.jpg' ! -name qt-logo.jpg)
O=$R/opencv-doc/usr/share/doc/opencv-doc/examples/data   # every top-level photo/test image
# shellcheck disable=SC2046
copy opencv $(find "$O" -maxdepth 1 -type f \( -name '*.jpg' -o -name '*.png' \) | sort)
# Exact duplicates (same bytes under two names) would make rankings ambiguous: keep the first.
find "$part" -type f -print0 | sort -z | xargs -0 sha256sum | awk 'seen[$1]++ {sub(/^[^ ]+  /, ""); print}' |
  while IFS= read -r f; do rm -f "$f"; done
for s in "${SUBS[@]}"; do
  rm -rf "${DEST:?}/$s"
  mv "$part/$s" "$DEST/$s"
done
n=$(find "$DEST" -type f | wc -l)
echo "fetch-samples: $n images under $DEST"
