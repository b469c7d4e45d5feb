#!/bin/bash
# Identification accuracy benchmark (issue 15), end to end: builds the sets (make_sets.py, fixed seed),
# indexes the references with `patina index -f rootsift`, runs `patina identify` (threshold 0: raw
# rank-1 scores) and the OpenCV peer (tests/peers/identify_opencv.py) on the same files, and scores
# them side by side (score.py) into $SETS/results/report.md, with plots (far_frr.png, scores.png) beside it.
#
#   bench/identify/run.sh [PATINA]       PATINA: the binary (default build/patina)
#
# Environment: SETS (scratch folder, default $TMPDIR/patina-identify), J (processes/threads, default
# nproc), MAKE_SETS_ARGS (extra make_sets.py options, e.g. a subset: "--refs 300 --genuine 100
# --impostor-textures 50 --impostor-photos 50"), PATINA_THRESHOLD (patina's default acceptance
# threshold, to report FAR/FRR at it; read from `patina identify --help` when unset), PEER_THRESHOLD
# (the threshold the peer variants are reported at; they have no default: 10), SKIP_PEER=1.
# A binary without the `identify` subcommand is reported and left out; the peer still runs.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PATINA=$(realpath -m "${1:-$ROOT/build/patina}")
SETS=$(realpath -m "${SETS:-${TMPDIR:-/tmp}/patina-identify}")
J=${J:-$(nproc)}
PY=$ROOT/.venv-identify/bin/python
[ -x "$PY" ] || "$ROOT/bench/identify/setup.sh"
# shellcheck disable=SC2086
"$PY" "$ROOT/bench/identify/make_sets.py" --out "$SETS" ${MAKE_SETS_ARGS:-}
RES=$SETS/results
mkdir -p "$RES"
cd "$SETS"   # relative paths: queries/g0001.png in every CSV
now() { date +%s.%N; }
have_patina=0
if [ -x "$PATINA" ] && "$PATINA" identify --help >/dev/null 2>&1; then
  have_patina=1
  rm -rf "$RES/refs.patina"
  t0=$(now); "$PATINA" index "$RES/refs.patina" refs -f rootsift -j "$J" -q; t1=$(now)
else
  echo "run.sh: $PATINA has no 'identify' subcommand (pending the identify branch): patina is left out" >&2
fi
# Content shared between ORIGINALS (score.py: held-out textures that share content with a registered one
# are "impostor-shared"; registered ones that share content are linked in the grouped view). Pairs are
# PROPOSED by the OpenCV peer (its best 3) and by patina (its best 10 / 5) and DECIDED by pixels
# (content_share.py: a homography of the pair, then band-passed tiles that correlate), so the matcher
# being scored does not decide what counts against it. Made once per SETS folder (delete shares.csv /
# siblings.csv to redo them); the contact sheets of found pairs go to results/shares.png, siblings.png.
propose() { # $1: folder of originals, $2: output folder, $3: peer's k, $4: patina's k
  nice -n 10 "$PY" "$ROOT/tests/peers/identify_opencv.py" --refs refs --out "$2" -j "$J" -k "$3" "$1"
  props=(--proposals "peer=$2/opencv_one2one_verify.csv")
  if [ "$have_patina" = 1 ]; then
    "$PATINA" identify "$RES/refs.patina" "$1" --format csv --threshold 0 -k "$4" -j "$J" -q > "$2/patina.csv" || [ $? -le 1 ]
    props+=(--proposals "patina=$2/patina.csv")
  fi
}
if [ ! -s shares.csv ] && [ "$(ls heldout 2>/dev/null | wc -l)" -gt 0 ]; then
  propose heldout shares 3 10
  nice -n 10 "$PY" "$ROOT/bench/identify/content_share.py" --refs refs --queries heldout "${props[@]}" \
    --out shares.csv --sheet "$RES/shares.png" -j "$J"
fi
if [ ! -s siblings.csv ]; then
  propose refs siblings 3 5
  nice -n 10 "$PY" "$ROOT/bench/identify/content_share.py" --refs refs --queries refs "${props[@]}" \
    --out siblings.csv --sheet "$RES/siblings.png" -j "$J"
fi
runs=() thr=() tim=()

if [ "$have_patina" = 1 ]; then
  t1a=$(now); rc=0; "$PATINA" identify "$RES/refs.patina" queries impostors --format csv --threshold 0 -k 5 -j "$J" -q \
    > "$RES/patina.csv" || rc=$?
  t2=$(now)
  [ "$rc" -le 1 ] || { echo "run.sh: patina identify failed (exit $rc)" >&2; exit "$rc"; }
  nref=$(find refs -type f | wc -l); nq=$(find queries impostors -type f | wc -l)
  { echo "system,stage,items,seconds"
    echo "patina,index_refs,$nref,$(awk "BEGIN{print $t1 - $t0}")"
    echo "patina,identify,$nq,$(awk "BEGIN{print $t2 - $t1a}")"; } > "$RES/patina_timings.csv"
  runs+=(--run "patina=$RES/patina.csv"); tim+=(--timings "$RES/patina_timings.csv")
  # the default from the help text: the --threshold entry runs until the next option line
  T=${PATINA_THRESHOLD:-$("$PATINA" identify --help 2>&1 | awk '/^ *--threshold/ {f = 1; print; next} f && /^ *-/ && match($0, /[^ ]/) < 10 {f = 0} f' |
    tr '\n' ' ' | grep -oE 'default [0-9.]+' | tail -n1 | grep -oE '[0-9.]+' || true)}
  if [ -n "$T" ]; then thr+=(--threshold "patina=$T"); fi
fi

if [ "${SKIP_PEER:-0}" != 1 ]; then
  nice -n 10 "$PY" "$ROOT/tests/peers/identify_opencv.py" --refs refs --out "$RES" -j "$J" queries impostors
  for v in raw one2one raw_verify one2one_verify; do
    runs+=(--run "opencv_$v=$RES/opencv_$v.csv"); thr+=(--threshold "opencv_$v=${PEER_THRESHOLD:-10}")
  done
  tim+=(--timings "$RES/opencv_timings.csv")
fi
[ ${#runs[@]} -gt 0 ] || { echo "run.sh: nothing ran" >&2; exit 3; }
"$PY" "$ROOT/bench/identify/score.py" --sets "$SETS" "${runs[@]}" "${thr[@]}" "${tim[@]}" --plots "$RES" \
  --out "$RES/report.md"
