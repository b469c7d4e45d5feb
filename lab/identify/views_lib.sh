#!/bin/bash
# The library's reference views (`patina index --views N`, docs/identify.md "Reference views") on the
# bench/identify full sets, scored as lab/identify/views.sh scored the lab's views (the items are the
# library's own now: no views_map.py), and the `--far` calibration of the run (bench/identify/calibrate.py
# under both content hygienes: the peer's, which src/identify/identify.c's tables use, and the pixels').
#
#   lab/identify/views_lib.sh N        e.g. lab/identify/views_lib.sh 2
#
# Environment: SETS (read only; default /tmp/acc-full, with results/patina_noguided.csv = the baseline's
# run), LAB (where this writes; default /tmp/viewsopt-lab), PATINA (default build-cpu/patina), PY (a
# python with numpy; default .venv-identify/bin/python), J (default 2), T (the threshold FAR/FRR are
# reported at; default 13).
# Writes LAB/vN/: refs.patina (the references indexed with --views N, defaults otherwise), info.txt,
# raw.csv (identify --threshold 0, -k 5, every query and impostor), timings.csv, report.md (score.py,
# beside the baseline), calibrate_peer.md and calibrate_pixels.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SETS=${SETS:-/tmp/acc-full}
LAB=${LAB:-/tmp/viewsopt-lab}
P=$(realpath "${PATINA:-$ROOT/build-cpu/patina}")
PY=${PY:-$ROOT/.venv-identify/bin/python}
J=${J:-2}
T=${T:-13}
n=$1
D=$LAB/v$n
mkdir -p "$D"
if [ ! -s "$D/raw.csv" ]; then
  rm -rf "$D/refs.patina"
  /usr/bin/time -f "%e %U %S" -o "$D/time_index.txt" "$P" index "$D/refs.patina" "$SETS/refs" -f rootsift \
    --views "$n" -j "$J" -q
  "$P" info "$D/refs.patina" > "$D/info.txt"
  cd "$SETS"   # relative query paths, as the baseline's CSV has them (nothing is written here)
  rc=0; /usr/bin/time -f "%e %U %S" -o "$D/time_identify.txt" "$P" identify "$D/refs.patina" queries impostors \
    --format csv --threshold 0 -j "$J" -q > "$D/raw.csv.part" || rc=$?
  [ "$rc" -le 1 ] || { echo "views_lib.sh: patina identify failed (exit $rc)" >&2; exit "$rc"; }
  mv "$D/raw.csv.part" "$D/raw.csv"
  read -r ei ui si < "$D/time_index.txt"; read -r eq uq sq < "$D/time_identify.txt"
  { echo "system,stage,items,seconds,cpu_seconds"
    echo "views$n,index,919,$ei,$(awk "BEGIN{print $ui + $si}")"
    echo "views$n,identify,800,$eq,$(awk "BEGIN{print $uq + $sq}")"; } > "$D/timings.csv"
fi
"$PY" "$ROOT/bench/identify/score.py" --sets "$SETS" \
  --run "base=$SETS/results/patina_noguided.csv" --threshold "base=$T" \
  --run "views$n=$D/raw.csv" --threshold "views$n=$T" --out "$D/report.md"
"$PY" "$ROOT/bench/identify/calibrate.py" --sets "$SETS" --run "$D/raw.csv" --shares "$SETS/shares_peer.csv" \
  > "$D/calibrate_peer.md"
"$PY" "$ROOT/bench/identify/calibrate.py" --sets "$SETS" --run "$D/raw.csv" > "$D/calibrate_pixels.md"
