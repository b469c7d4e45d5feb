#!/bin/sh
# lab/identify/wgmma/run.sh [BUILD] [lab_wgmma options]: builds lab_wgmma
# (sm_90a) in BUILD (default build-wgmma; a build tree of the whole project
# that already has lab/identify/wgmma/lab_wgmma is used as it is), shows the
# kernels' ptxas numbers and the SASS's tensor-core instructions, then runs
# the harness (every shape, four kernels in four child processes; about a
# minute on an H200 after the build).
# Exit status: the harness's (0 all equal, 1 a difference or a fault, 77 no GPU).
set -eu
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=${1:-build-wgmma}
[ $# -gt 0 ] && shift
case $build in /*) ;; *) build=$root/$build ;; esac
bin=$build/lab/identify/wgmma/lab_wgmma
if [ ! -x "$bin" ]; then
  bin=$build/lab_wgmma
  mkdir -p "$build"
  echo "run.sh: building $bin"
  nvcc -std=c++17 -O3 --generate-code=arch=compute_90a,code=sm_90a -Xptxas -v \
    -I"$root/src" -I"$root/include" -Xcompiler -O3,-ffp-contract=off,-fopenmp \
    "$root/lab/identify/wgmma/lab_wgmma.cu" -o "$bin" 2>"$build/ptxas.txt" || { cat "$build/ptxas.txt"; exit 2; }
  grep -A3 "Compiling entry function '_Z1[0-9]k_idf_match" "$build/ptxas.txt" | grep -v "^--" || true
fi
if command -v cuobjdump >/dev/null 2>&1; then
  echo "run.sh: SASS tensor-core instructions: $(cuobjdump -sass "$bin" | grep -oE '[A-Z]+GMMA\.[0-9x]+\.[A-Z0-9.]+|HMMA\.[0-9A-Z.]+|IMMA\.[0-9A-Z.]+' | sort | uniq -c | tr '\n' ';')"
fi
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm --format=csv,noheader 2>/dev/null || true
exec "$bin" "$@"
