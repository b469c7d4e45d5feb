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
# mapped.csv, timings.csv (wall and CPU seconds), report.md; LAB/base_mapped.csv (the baseline through views_map.py: unchanged).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SETS=${SETS:-/tmp/acc-full}
LAB=${LAB:-/tmp/views-lab}
P=$(realpath "${PATINA:-$ROOT/build-cpu/patina}")
PY=${PY:-$ROOT/.venv-identify/bin/python}
J=${J:-2}
T=${T:-13}
if [ "$1" = --time ]; then
  shift
  [ -d "$LAB/base/refs.patina" ] || { mkdir -p "$LAB/base"; cp -r "$SETS/results/refs.patina" "$LAB/base/"; }
  cd "$SETS"
  mapfile -t qs < <(ls queries/* | head -n 50; ls impostors/* | head -n 50)
  for round in $(seq "${ROUNDS:-2}"); do
    for n in base "$@"; do
      idx=$LAB/$n/refs.patina   # base: a copy of the baseline's index (SETS is only read)
      /usr/bin/time -f "%e %U %S" -o "$LAB/time.txt" "$P" identify "$idx" "${qs[@]}" --format csv --threshold 0 \
        -k 20 -j "$J" -q > /dev/null || [ $? -le 1 ]
      read -r e u s < "$LAB/time.txt"
      echo "round $round, $n: ${#qs[@]} queries: wall $e s, CPU $(awk "BEGIN{print $u + $s}") s; load $(cut -d' ' -f1 /proc/loadavg)"
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
  /usr/bin/time -f "%e %U %S" -o "$D/time_index.txt" "$P" index "$D/refs.patina" "$D/views" -f rootsift -j "$J" -q
  "$P" info "$D/refs.patina" > "$D/info.txt"
  cd "$SETS"   # relative query paths, as the baseline's CSV has them (nothing is written here)
  rc=0; /usr/bin/time -f "%e %U %S" -o "$D/time_identify.txt" "$P" identify "$D/refs.patina" queries impostors \
    --format csv --threshold 0 -k 20 -j "$J" -q > "$D/raw.csv.part" || rc=$?
  [ "$rc" -le 1 ] || { echo "views.sh: patina identify failed (exit $rc)" >&2; exit "$rc"; }
  mv "$D/raw.csv.part" "$D/raw.csv"
  nv=$(find "$D/views" -type f | wc -l)
  read -r ei ui si < "$D/time_index.txt"; read -r eq uq sq < "$D/time_identify.txt"
  { echo "system,stage,items,seconds,cpu_seconds"
    echo "$name,index_views,$nv,$ei,$(awk "BEGIN{print $ui + $si}")"
    echo "$name,identify,800,$eq,$(awk "BEGIN{print $uq + $sq}")"; } > "$D/timings.csv"
fi
"$PY" "$ROOT/lab/identify/views_map.py" "$D/raw.csv" "$D/mapped.csv"
"$PY" "$ROOT/lab/identify/views_map.py" "$SETS/results/patina_noguided.csv" "$LAB/base_mapped.csv"
"$PY" "$ROOT/bench/identify/score.py" --sets "$SETS" \
  --run "base=$LAB/base_mapped.csv" --threshold "base=$T" \
  --run "$name=$D/mapped.csv" --threshold "$name=$T" --out "$D/report.md"
