#!/usr/bin/env bash
# Runs the libFuzzer targets of a PATINA_FUZZ build one after another, each
# for SECONDS with its generated seeds and dictionary, and prints per target:
# executions, executions per second, coverage (edges) at the start and the
# end, new corpus units and crashes. Exits 1 if any target crashed, hung,
# leaked or ran out of memory (the input is kept under <build>/fuzz/<name>/crashes/).
#
#   scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]     (TARGET: jpeg, png, ...; default all)
#
# Per target, in BUILD_DIR/fuzz/<name>/: seeds/ and dict (written by the
# build), corpus/ (what the fuzzer found; kept between runs, so later runs
# start where earlier ones stopped), crashes/ and the log of the last run.
# tests/fuzz/regress/<name>/ (inputs that once failed) is read too.
# Extra libFuzzer flags: FUZZ_FLAGS="-max_len=65536 -only_ascii=1" (appended).
set -uo pipefail

build=${1:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]}
seconds=${2:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
bindir="$build/tests/fuzz"
regress="$(cd "$(dirname "$0")/.." && pwd)/tests/fuzz/regress" # inputs that once failed, one folder per target

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for b in "$bindir"/fuzz_*; do
    [ -x "$b" ] && [ -f "$b" ] && targets+=("$(basename "$b" | sed 's/^fuzz_//')")
  done
fi
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no targets in $bindir (build with -DPATINA_FUZZ=ON, e.g. make fuzz)" >&2
  exit 2
fi

failed=0
rows=()
for t in "${targets[@]}"; do
  bin="$bindir/fuzz_$t"
  dir="$build/fuzz/$t"
  if [ ! -x "$bin" ] || [ ! -d "$dir/seeds" ]; then
    echo "fuzz: no target '$t' ($bin, $dir/seeds)" >&2
    exit 2
  fi
  mkdir -p "$dir/corpus" "$dir/crashes"
  dict=()
  [ -s "$dir/dict" ] && dict=(-dict="$dir/dict")
  extra=()
  [ -d "$regress/$t" ] && extra=("$regress/$t")
  echo "fuzz: $t for ${seconds}s (log: $dir/log)"
  # -timeout: an input running 10 s is a hang; -rss_limit_mb: 2 GiB is an
  # out-of-memory; ASan's leak check runs on every input that allocated more
  # than it freed.
  # shellcheck disable=SC2086
  "$bin" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$dir/crashes/" "${dict[@]}" ${FUZZ_FLAGS:-} "$dir/corpus" "$dir/seeds" "${extra[@]}" \
    >"$dir/log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
  units=$(sed -n 's/^stat::new_units_added: *//p' "$dir/log" | tail -1)
  cov0=$(sed -n 's/.*INITED cov: \([0-9]*\).*/\1/p' "$dir/log" | head -1)
  cov1=$(sed -n 's/^#[0-9].* cov: \([0-9]*\).*/\1/p' "$dir/log" | tail -1)
  if [ -z "$execs" ]; then # killed before the final stats: the last status line
    execs=$(sed -n 's/^#\([0-9]*\).*/\1/p' "$dir/log" | tail -1)
  fi
  crashes=0
  if [ $rc -ne 0 ]; then
    crashes=1
    failed=1
    what=$(grep -m1 -E "^==[0-9]+==ERROR|^SUMMARY|ALARM: working|out-of-memory|fuzz check failed|deadly signal" \
           "$dir/log" || echo "exit status $rc")
    unit=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$dir/log" | tail -1)
    echo "fuzz: $t FAILED: $what" >&2
    echo "fuzz:   input: ${unit:-(none written)}; reproduce: $bin ${unit:-<input>}" >&2
  fi
  rows+=("$(printf '%-10s %12s %9s %8s %8s %9s %8s' "$t" "${execs:-?}" "${rate:-?}" \
            "${cov0:-?}" "${cov1:-?}" "${units:-?}" "$crashes")")
done

printf '\n%-10s %12s %9s %8s %8s %9s %8s\n' target execs exec/s cov0 cov new_units crashes
printf '%s\n' "${rows[@]}"
exit $failed
