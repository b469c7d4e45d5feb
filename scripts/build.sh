#!/usr/bin/env bash
# Configures and builds with CMake, quietly: CMake's and the compiler's
# output go to BUILD/build.log. Printed: what the configure step found (its
# "patina: ..." lines), what is compiled, the time it took; on failure the
# errors from the log and the log's name. On a terminal a progress line.
# Usage: scripts/build.sh BUILD TARGETS [CMAKE_ARGS...]
#   TARGETS: all, or CMake target names separated by spaces
#   JOBS (environment): parallel jobs (default: the number of CPUs)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 2 ] || { echo "usage: scripts/build.sh BUILD TARGETS [CMAKE_ARGS...]" >&2; exit 2; }
build=$1
targets=$2
shift 2
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
mkdir -p "$build" || exit 1
log=$build/build.log
start=$(date +%s)

fail() {  # fail WHAT
  echo "build: $1 failed; the errors:" >&2
  local pat='error:|warning:|CMake Error|FAILED:|\*\*\*|undefined reference'
  if grep -q -E "$pat" "$log"; then
    grep -E -B2 -A3 "$pat" "$log" | head -n 60 >&2
  else
    tail -n 40 "$log" >&2
  fi
  echo "build: the whole output: $log" >&2
  exit 1
}

if ! cmake -S "$here" -B "$build" "$@" >"$log" 2>&1; then fail "configuring $build"; fi
sed -n 's/^-- patina: /build: /p' "$log"

args=(--build "$build" -j"$jobs")
if [ "$targets" = all ]; then
  what="everything (library, CLI, tests, benchmarks)"
else
  read -r -a names <<<"$targets"
  args+=(--target "${names[@]}")
  what=$targets
fi
echo "build: compiling $what in $build (-j$jobs; log: $log)"
if [ -t 1 ]; then
  # the generator's progress ("[ 42%] ..." or "[17/93] ...") on one line
  cmake "${args[@]}" 2>&1 | tee -a "$log" |
    awk '/^\[ *[0-9]+%\]|^\[[0-9]+\/[0-9]+\]/ { printf "\r\033[K%s", substr($0, 1, 100); fflush() }
         END { printf "\r\033[K" }'
  rc=${PIPESTATUS[0]}
else
  cmake "${args[@]}" >>"$log" 2>&1
  rc=$?
fi
[ "$rc" -eq 0 ] || fail "compiling"
echo "build: done in $(($(date +%s) - start)) s"
