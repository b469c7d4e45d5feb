#!/bin/sh
# GPU build, tests and benchmark on the lent GPU machine (docs/gpu.md).
#
#   DEVICE_BUILD=DIR (default build-device, relative to the repo root) picks
#   the build directory for both modes, so parallel work can carry its own.
#   DEVICE_LINEINFO=1 compiles the kernels with -lineinfo (for Nsight
#   Compute's source view; ~3x larger binaries, the carry may not fit).
#
#   scripts/device.sh [build]   HERE: configure and build for sm_90 (Release, CUDA
#                               on) into build-device/, copy the shared libraries
#                               the device lacks into build-device/lib, check the
#                               carried size, and print the `run` call to make.
#   scripts/device.sh remote    ON THE DEVICE (from the repo root of its copy):
#                               gpu-labelled tests (ctest -L gpu), compute-sanitizer
#                               (memcheck) on the CEDD GPU test once, bench_cedd,
#                               and bench_cedd --e2e on samples/ when carried.
#                               Then the microbenchmarks (bench/micro).
#                               Logs go under $OUT (or ./device-out).
#                               DEVICE_NCU=1 adds Nsight Compute on the kernels;
#                               BENCH_ARGS passes arguments to bench_cedd.
#
# The device receives a copy of the working tree at another path, plus the
# carried build-device/. The build tree holds this machine's absolute paths
# (ctest files, PATINA_TEST_DATA baked into the tests), so `remote` links the
# original source path to the copy when that path does not exist there.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/${DEVICE_BUILD:-build-device}
MODE=${1:-build}

# Libraries a minimal CUDA image is assumed to have; everything else the
# binaries need is copied along.
SYSTEM_LIBS='linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libgcc_s|libstdc\+\+|libz\.so'

build() {
    jobs=$(nproc 2>/dev/null || echo 2)
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DPATINA_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90-real -DPATINA_WERROR=ON \
        -DPATINA_CUDA_LINEINFO="$([ -n "${DEVICE_LINEINFO:-}" ] && echo ON || echo OFF)"
    if ! cmake --build "$BUILD" -j"$jobs"; then
        # Work in progress elsewhere in the tree must not block a GPU run:
        # build what the device run needs, each on its own.
        echo "full build failed; building the GPU tests and benchmarks only" >&2
        for t in $(cd "$ROOT" && ls tests/gpu/test_*.c bench/*.c 2>/dev/null); do
            name=$(basename "$t" .c)
            case $t in bench/*) name=bench_$name ;; esac
            cmake --build "$BUILD" -j"$jobs" --target "$name" || echo "  (target $name failed)" >&2
        done
    fi
    # Microbenchmarks (bench/micro/*.cu, one file each, not products): built
    # for sm_90a here, run at the end of `remote`.
    nvcc=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
    mkdir -p "$BUILD/micro"
    for src in "$ROOT"/bench/micro/*.cu; do
        [ -e "$src" ] && [ -x "$nvcc" ] || continue
        exe=$BUILD/micro/$(basename "$src" .cu)
        [ "$exe" -nt "$src" ] || "$nvcc" -O3 -gencode arch=compute_90a,code=sm_90a -Werror all-warnings \
            -o "$exe" "$src"
    done
    mkdir -p "$BUILD/lib"
    for bin in "$BUILD"/tests/test_* "$BUILD"/bench/bench_* "$BUILD"/patina; do
        [ -x "$bin" ] && [ -f "$bin" ] || continue
        ldd "$bin" | awk '/=> \// {print $1, $3}' | while read -r name path; do
            echo "$name" | grep -Eq "^($SYSTEM_LIBS)" && continue
            [ -e "$BUILD/lib/$name" ] || cp -L "$path" "$BUILD/lib/$name"
        done
    done
    echo "libraries carried: $(ls "$BUILD/lib" | tr '\n' ' ')"
    # Keep the carry small (64 MiB for everything that travels): drop what the
    # device run does not use -- CMake's compiler-id scratch, the shared
    # libraries (static and shared), and the non-GPU test programs (the next
    # build re-archives and relinks them).
    rm -rf "$BUILD/CMakeFiles/CheckCUDA" "$BUILD"/CMakeFiles/*/CompilerId*/tmp "$BUILD"/libpatina.so* "$BUILD"/libpatina.a
    for t in "$ROOT"/tests/test_*.c; do rm -f "$BUILD/tests/$(basename "$t" .c)"; done
    # What travels: the working tree (tracked + untracked, not ignored), build-device, samples.
    tree_kb=$(cd "$ROOT" && git ls-files -co --exclude-standard -z | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    build_kb=$(du -sk "$BUILD" | cut -f1)
    carry="\"${DEVICE_BUILD:-build-device}\""
    samples_kb=0
    if [ -d "$ROOT/samples" ]; then
        samples_kb=$(du -sk "$ROOT/samples" | cut -f1)
        if [ $((tree_kb + build_kb + samples_kb)) -lt 64500 ]; then
            carry="\"${DEVICE_BUILD:-build-device}\", \"samples\""
        else
            # too big together: the sample folders that fit, smallest first
            # (the device run only needs some real photographs)
            samples_kb=0
            for d in $(cd "$ROOT" && du -sk samples/*/ 2>/dev/null | sort -n | cut -f2); do
                kb=$(du -sk "$ROOT/$d" | cut -f1)
                [ $((tree_kb + build_kb + samples_kb + kb)) -lt 64500 ] || break
                samples_kb=$((samples_kb + kb))
                carry="$carry, \"${d%/}\""
            done
        fi
    fi
    echo "size: working tree ${tree_kb} KiB + build-device ${build_kb} KiB + samples ${samples_kb} KiB (limit 65536 KiB)"
    cat <<EOF

Now run, with the device tool:
  run(kind="nvidia-h100-x1", carry=[$carry], timeout_s=600,
      command="${DEVICE_BUILD:+DEVICE_BUILD=$DEVICE_BUILD }sh scripts/device.sh remote")
Logs come back under \$OUT: nvidia-smi.txt ctest-gpu.log e2e.log bench_knn.log bench_lbp.log bench_lbp_1024.log bench_glcm.log
sanitizer.log bench_cedd.log (+ ncu.txt). BENCH_ARGS="" gives the full Table 3 run.
EOF
}

remote() {
    OUT=${OUT:-$ROOT/device-out}
    mkdir -p "$OUT"
    [ -d "$BUILD" ] || { echo "no build-device/: carry it (see scripts/device.sh build)" >&2; exit 1; }
    export LD_LIBRARY_PATH="$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD/CMakeCache.txt")
    if [ -n "$src" ] && [ "$src" != "$ROOT" ] && [ ! -e "$src" ]; then
        mkdir -p "$(dirname "$src")"
        ln -s "$ROOT" "$src"
        echo "linked $src -> $ROOT (the build tree's paths)"
    fi
    rc=0
    { nvidia-smi; nvidia-smi -q -d CLOCK,POWER,PCI 2>/dev/null | head -80; } > "$OUT/nvidia-smi.txt" 2>&1 || true
    head -12 "$OUT/nvidia-smi.txt"

    # Order = priority: a command stopped at its time limit still returns
    # every log written so far under $OUT.
    echo "== ctest -L gpu"
    (cd "$BUILD" && timeout 170 ctest -L gpu --output-on-failure -V) > "$OUT/ctest-gpu.log" 2>&1 || rc=1
    grep -E "^[0-9]+/[0-9]+ Test|tests passed|PASSED|FAILED|SKIPPED" "$OUT/ctest-gpu.log" | tail -25

    if [ -d "$ROOT/samples" ]; then
        echo "== bench_cedd --e2e: ${E2E_FILES:-10000} VGA JPEGs (crops of samples/) -> collection"
        vga=${TMPDIR:-/tmp}/patina-vga
        rm -rf "$vga" && mkdir -p "$vga"
        { timeout 60 "$BUILD/bench/bench_cedd" --make-jpegs "$vga" "${E2E_FILES:-10000}" "$ROOT/samples" &&
          timeout 90 "$BUILD/bench/bench_cedd" --e2e "$vga" &&
          for r in 2 3; do    # run-to-run spread of the fastest mode
              timeout 30 "$BUILD/bench/bench_cedd" --e2e "$vga" --device nvjpeg | tail -1
          done; } > "$OUT/e2e.log" 2>&1 || rc=1
        cat "$OUT/e2e.log"
    fi

    if [ -x "$BUILD/bench/bench_knn" ]; then
        echo "== bench_knn"
        (cd "$ROOT" && PATINA_PYTHON=python3 timeout 120 "$BUILD/bench/bench_knn") > "$OUT/bench_knn.log" 2>&1 || rc=1
        cat "$OUT/bench_knn.log"
    fi

    for b in lbp glcm; do
        [ -x "$BUILD/bench/bench_$b" ] || continue
        echo "== bench_$b"
        (cd "$ROOT" && PATINA_PYTHON=python3 timeout "$([ $b = glcm ] && echo 150 || echo 110)" \
            "$BUILD/bench/bench_$b") > "$OUT/bench_$b.log" 2>&1 || rc=1
        cat "$OUT/bench_$b.log"
    done
    if [ -x "$BUILD/bench/bench_lbp" ]; then
        # the 2 TB/s target's rows: 1024 images of 1024^2 per launch
        echo "== bench_lbp --batched-only --quick --no-peers --batch 1024"
        (cd "$ROOT" && timeout 90 "$BUILD/bench/bench_lbp" --batched-only --quick --no-peers --batch 1024) \
            > "$OUT/bench_lbp_1024.log" 2>&1 || rc=1
        cat "$OUT/bench_lbp_1024.log"
    fi

    echo "== compute-sanitizer memcheck (quick GPU tests)"
    for t in test_cedd_gpu test_lbp_gpu test_glcm_gpu test_nvjpeg_gpu test_knn_gpu; do
        [ -x "$BUILD/tests/$t" ] || continue
        PATINA_TEST_QUICK=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 \
            "$BUILD/tests/$t" > "$OUT/sanitizer-one.log" 2>&1 || rc=1
        { echo "=== $t"; cat "$OUT/sanitizer-one.log"; } >> "$OUT/sanitizer.log"
        echo "$t: $(grep -E "ERROR SUMMARY" "$OUT/sanitizer-one.log" | tail -1) $(grep -E "PASSED|FAILED" "$OUT/sanitizer-one.log" | tail -1)"
    done

    rm -f "$OUT/sanitizer-one.log"   # the files that come back from $OUT are limited
    echo "== bench_cedd ${BENCH_ARGS:---quick}"
    # shellcheck disable=SC2086
    timeout 60 "$BUILD/bench/bench_cedd" ${BENCH_ARGS:---quick} > "$OUT/bench_cedd.log" 2>&1 || rc=1
    cat "$OUT/bench_cedd.log"

    for m in "$BUILD"/micro/*; do
        [ -x "$m" ] || continue
        echo "== micro $(basename "$m")"
        timeout 60 "$m" > "$OUT/micro_$(basename "$m").log" 2>&1 || rc=1
        cat "$OUT/micro_$(basename "$m").log"
    done

    if [ -n "${DEVICE_NCU:-}" ]; then
        # Nsight Compute on the CEDD kernels of a VGA device-resident run.
        ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
        echo "== ncu ($ncu)"
        [ -n "$ncu" ] && timeout 180 "$ncu" --kernel-name regex:'k_block_sums|k_contrib|k_accumulate' \
            --launch-skip 30 --launch-count 3 --section SpeedOfLight --section Occupancy \
            --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
            --section WarpStateStats --section SchedulerStats --section LaunchStats \
            "$BUILD/bench/bench_cedd" --sizes 640x480 --quick > "$OUT/ncu.txt" 2>&1 || true
        grep -E "k_block_sums|k_contrib|k_accumulate|Duration|Throughput|Achieved Occupancy|Registers|Issue Slots Busy|No Eligible|Stall|Pipe|L2 Hit|Executed Ipc" \
            "$OUT/ncu.txt" | head -90
    fi
    return $rc
}

case $MODE in
build) build ;;
remote) remote ;;
*) echo "usage: scripts/device.sh [build|remote]" >&2; exit 2 ;;
esac
