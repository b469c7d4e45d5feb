#!/usr/bin/env bash
# Source coverage of the fuzz corpora: builds the fuzz targets once more with
# clang's source-based coverage (in BUILD_DIR-cov), replays each target's
# seeds, corpus and regression inputs (no fuzzing, -runs=0) and prints
# llvm-cov's line and branch coverage of the files that target is about.
#
#   scripts/fuzz-coverage.sh BUILD_DIR [TARGET...]     (BUILD_DIR: the make fuzz build, build-fuzz)
set -euo pipefail

build=${1:?usage: scripts/fuzz-coverage.sh BUILD_DIR [TARGET...]}
shift
src="$(cd "$(dirname "$0")/.." && pwd)"
cov="$build-cov"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(jpeg png pnm options keys)

CC=clang cmake -S "$src" -B "$cov" -DPATINA_FUZZ=ON -DPATINA_CUDA=OFF -DPATINA_TESTS=OFF \
  -DPATINA_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="-fprofile-instr-generate -fcoverage-mapping" \
  -DCMAKE_EXE_LINKER_FLAGS="-fprofile-instr-generate" >/dev/null
cmake --build "$cov" -j"$(nproc)" --target patina_fuzz >/dev/null

for t in "${targets[@]}"; do
  case $t in
    jpeg) files=(src/image/jpeg.c src/image/image.c) ;;
    png) files=(src/image/png.c src/image/image.c) ;;
    pnm) files=(src/image/pnm.c src/image/image.c) ;;
    options) files=(src/core/options.c src/features/registry.c) ;;
    keys) files=(src/store/lmdb.c) ;;
    *) files=() ;;
  esac
  dirs=()
  for d in "$build/fuzz/$t/corpus" "$build/fuzz/$t/seeds" "$src/tests/fuzz/regress/$t"; do
    [ -d "$d" ] && dirs+=("$d")
  done
  rm -f "$cov/$t".prof*
  LLVM_PROFILE_FILE="$cov/$t.profraw" "$cov/tests/fuzz/fuzz_$t" -runs=0 "${dirs[@]}" >"$cov/$t.replay.log" 2>&1
  llvm-profdata merge -sparse "$cov/$t.profraw" -o "$cov/$t.profdata"
  echo "== $t: $(grep -o 'INITED.*corp: [0-9/]*[a-zA-Z]*' "$cov/$t.replay.log" | sed 's/ ft:.*corp:/ inputs:/')"
  llvm-cov report "$cov/tests/fuzz/fuzz_$t" -instr-profile="$cov/$t.profdata" \
    "${files[@]/#/$src/}" | grep -v -e '^---' -e '^TOTAL'
done
