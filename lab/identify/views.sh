#!/bin/bash
# The "extra reference views at registration" lever of issue 30, measured on the bench/identify full sets:
# every reference gets synthetic views (views_make.py), registered as extra references under keys that
# name the item (<file>@<view>.png), indexed with the baseline's `patina index -f rootsift` defaults; all
# queries and impostors identified as the baseline was (threshold 0, -j 2, CSV; -k 20 so that five
# distinct references remain once the views are folded back), then views_map.py folds every view's row
# into its reference (best row per reference, re-ranked, first five kept) and score.py scores the items
# beside the baseline run re-scored the same way.
#
#   lab/identify/views.sh NAME VIEW [VIEW ...]      e.g. lab/identify/views.sh v12 v1 v2
#   lab/identify/views.sh --time NAME [NAME ...]     identify time, back to back: the first 50 genuine
#       queries and the first 50 impostors (by file name) against a copy of the baseline's index
#       (LAB/base), then against each LAB/NAME/refs.patina, ROUNDS rounds (default 2), under the same load
#
# Environment: SETS (the sets, read only; default /tmp/acc-full, with results/refs.patina = the baseline's
# index and results/patina_noguided.csv = its run), LAB (where this writes; default /tmp/views-lab),
# PATINA (default build-cpu/patina), PY (a python with cv2 and numpy; default .venv-identify/bin/python),
# J (default 2), T (the threshold FAR/FRR are reported at; default 13).
# Writes LAB/NAME/: views/ (the PNGs), refs.patina (the baseline's index copied, the views added: the
# original references' records are the same bytes as a fresh index of them would give), raw.csv,
# mapped.csv, timings.csv, report.md; LAB/base_mapped.csv (the baseline through views_map.py: unchanged).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SETS=${SETS:-/tmp/acc-full}
LAB=${LAB:-/tmp/views-lab}
P=$(realpath "${PATINA:-$ROOT/build-cpu/patina}")
PY=${PY:-$ROOT/.venv-identify/bin/python}
J=${J:-2}
T=${T:-13}
now() { date +%s.%N; }
if [ "$1" = --time ]; then
  shift
  [ -d "$LAB/base/refs.patina" ] || { mkdir -p "$LAB/base"; cp -r "$SETS/results/refs.patina" "$LAB/base/"; }
  cd "$SETS"
  mapfile -t qs < <(ls queries/* | head -n 50; ls impostors/* | head -n 50)
  for round in $(seq "${ROUNDS:-2}"); do
    for n in base "$@"; do
      idx=$LAB/$n/refs.patina   # base: a copy of the baseline's index (SETS is only read)
      t0=$(now); "$P" identify "$idx" "${qs[@]}" --format csv --threshold 0 -k 20 -j "$J" -q > /dev/null || [ $? -le 1 ]
      t1=$(now)
      echo "round $round, $n: ${#qs[@]} queries in $(awk "BEGIN{print $t1 - $t0}") s; load $(cut -d' ' -f1 /proc/loadavg)"
    done
  done
  exit 0
fi
name=$1; shift
D=$LAB/$name
mkdir -p "$D"

if [ ! -s "$D/raw.csv" ]; then
  rm -rf "$D/views" "$D/refs.patina"
  "$PY" "$ROOT/lab/identify/views_make.py" "$SETS/refs" "$D/views" "$@"
  cp -r "$SETS/results/refs.patina" "$D/refs.patina"
  t0=$(now); "$P" index "$D/refs.patina" "$D/views" -f rootsift -j "$J" -q; t1=$(now)
  "$P" info "$D/refs.patina" > "$D/info.txt"
  cd "$SETS"   # relative query paths, as the baseline's CSV has them (nothing is written here)
  rc=0; "$P" identify "$D/refs.patina" queries impostors --format csv --threshold 0 -k 20 -j "$J" -q \
    > "$D/raw.csv.part" || rc=$?
  t2=$(now)
  [ "$rc" -le 1 ] || { echo "views.sh: patina identify failed (exit $rc)" >&2; exit "$rc"; }
  mv "$D/raw.csv.part" "$D/raw.csv"
  nv=$(find "$D/views" -type f | wc -l)
  { echo "system,stage,items,seconds"
    echo "$name,index_views,$nv,$(awk "BEGIN{print $t1 - $t0}")"
    echo "$name,identify,800,$(awk "BEGIN{print $t2 - $t1}")"; } > "$D/timings.csv"
fi
"$PY" "$ROOT/lab/identify/views_map.py" "$D/raw.csv" "$D/mapped.csv"
"$PY" "$ROOT/lab/identify/views_map.py" "$SETS/results/patina_noguided.csv" "$LAB/base_mapped.csv"
"$PY" "$ROOT/bench/identify/score.py" --sets "$SETS" \
  --run "base=$LAB/base_mapped.csv" --threshold "base=$T" \
  --run "$name=$D/mapped.csv" --threshold "$name=$T" --out "$D/report.md"
