#!/bin/sh
# Registering references at scale (issue 29): N JPEGs of 1024 x 1024 cut
# from the sample photographs (make_files.py, on every core), then
#   patina index COLL FILES -f rootsift --device D
# into a new LMDB collection, timed from the command line as a user runs
# it: files/s end to end (read, decode, extract, store, SHA-256 of every
# file), the minutes 1 M references would take at that rate, the
# collection's bytes per reference. The files are made once per N and kept under $WORK.
#
#   bench/index_scale/run.sh [BUILD_DIR]     (default build/, or $BUILD)
#
# Environment: N (files, default 100000), DEVICE (auto), FAMILY (rootsift),
# SIZE (1024), WORK (default $TMPDIR/patina-index-scale), SRC (the
# photographs, default samples/), PYTHON (python3 with OpenCV), KEEP=1
# (keep the collection).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-${BUILD:-$ROOT/build}}
N=${N:-100000}
DEVICE=${DEVICE:-auto}
FAMILY=${FAMILY:-rootsift}
SIZE=${SIZE:-1024}
WORK=${WORK:-${TMPDIR:-/tmp}/patina-index-scale}
SRC=${SRC:-$ROOT/samples}
PY=${PYTHON:-python3}
FILES=$WORK/files-$N-$SIZE
COLL=$WORK/coll
mkdir -p "$WORK"
if [ ! -f "$FILES/.done" ]; then
    rm -rf "$FILES"
    t0=$(date +%s.%N)
    "$PY" "$ROOT/bench/index_scale/make_files.py" --src "$SRC" --out "$FILES" --n "$N" --size "$SIZE"
    touch "$FILES/.done"
    echo "index_scale: files made in $(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(date +%s.%N)") s"
fi
rm -rf "$COLL"
sync
t0=$(date +%s.%N)
"$BUILD/patina" index "$COLL" "$FILES" -f "$FAMILY" --device "$DEVICE" > "$WORK/index.log" 2>&1 || {
    tail -20 "$WORK/index.log"
    exit 1
}
t1=$(date +%s.%N)
tail -1 "$WORK/index.log"
n=$(sed -n 's/.*indexed \([0-9][0-9]*\),.*/\1/p' "$WORK/index.log" | tail -1)
bytes=$(du -sb "$COLL" | cut -f1)
python3 - "$N" "$n" "$t0" "$t1" "$bytes" "$FAMILY" "$DEVICE" "$SIZE" <<'PY'
import sys
N, n, t0, t1, b, fam, dev, size = sys.argv[1:]
N, n, dt, b = int(N), int(n), float(t1) - float(t0), int(b)
rate = n / dt if dt > 0 else 0
print("| files | records | wall s | files/s | 1 M references at this rate | bytes/record (LMDB) | family | device |")
print("|---|---|---|---|---|---|---|---|")
print("| %d of %sx%s | %d | %.1f | %.0f | %.1f min | %.0f | %s | %s |" % (N, size, size, n, dt, rate,
      1e6 / rate / 60 if rate else float("inf"), b / max(n, 1), fam, dev))
PY
[ "${KEEP:-0}" = 1 ] || rm -rf "$COLL"
