#!/usr/bin/env bash
# The `make run` demo: index the sample photographs into an LMDB collection,
# make a near-duplicate query (crop + rescale + JPEG recompression) of one of
# them, and print the ranked results; the source should come first.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build}
case "$BUILD" in /*) ;; *) BUILD=$here/$BUILD ;; esac
P=$BUILD/patina
cd "$here"
mkdir -p demo
echo "== $("$P" --version)"
echo "== indexing samples/ into demo/photos.patina (an LMDB collection)"
"$P" index demo/photos.patina samples --root .   # keys: samples/... (relative to the repository)
src=$(find samples/mate -type f -name '*.jpg' | sort | sed -n 3p)
[ -n "$src" ] || src=$(find samples -type f | sort | head -n 1)
"$BUILD"/patina-variant "$src" demo/query.jpg --crop 8 --scale 0.6 --quality 70
echo "== query: demo/query.jpg = $src cropped 8% per side, scaled 0.6x, JPEG quality 70"
"$P" search demo/photos.patina demo/query.jpg -k 5
top=$("$P" search demo/photos.patina demo/query.jpg -k 1 --format csv | cut -d, -f3)
if [ "$top" = "$src" ]; then
  echo "== the source photograph ranks first"
else
  echo "== WARNING: first hit is $top, not the source $src" >&2
  exit 1
fi
