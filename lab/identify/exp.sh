#!/bin/bash
# One identification experiment on the bench/identify sets: index the references with a rootsift spec,
# identify every query (threshold 0, k 5), score against the default run.
#   lab/identify/exp.sh NAME SPEC [identify options...]
# Results: $SETS/results/NAME.csv, NAME_timings.txt; the score table on stdout, beside the run BASE
# (default: base, i.e. lab/identify/exp.sh base rootsift) when that exists. T: the threshold reported.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
P=${PATINA:-$ROOT/build/patina}
SETS=${SETS:-${TMPDIR:-/tmp}/patina-identify}
J=${J:-$(nproc)}
name=$1 spec=$2; shift 2
cd "$SETS"; R=results
if [ ! -e "$R/refs_$name.patina" ] || [ "${REINDEX:-0}" = 1 ]; then
  rm -rf "$R/refs_$name.patina"
  t0=$(date +%s.%N); "$P" index "$R/refs_$name.patina" refs -f "$spec" -j "$J" -q; t1=$(date +%s.%N)
  echo "index $(awk "BEGIN{print $t1 - $t0}") s" > "$R/${name}_timings.txt"
fi
t1=$(date +%s.%N)
"$P" identify "$R/refs_$name.patina" queries impostors --format csv --threshold 0 -k 5 -j "$J" -q "$@" > "$R/$name.csv" || [ $? -le 1 ]
t2=$(date +%s.%N); echo "identify $(awk "BEGIN{print $t2 - $t1}") s" >> "$R/${name}_timings.txt"
cat "$R/${name}_timings.txt"
BASE=${BASE:-base}
args=(--run "$name=$R/$name.csv" --threshold "$name=${T:-12}")
if [ "$name" != "$BASE" ] && [ -e "$R/$BASE.csv" ]; then args=(--run "$BASE=$R/$BASE.csv" --threshold "$BASE=12" "${args[@]}"); fi
"$ROOT/.venv-identify/bin/python" "$ROOT/bench/identify/score.py" --sets . "${args[@]}"
