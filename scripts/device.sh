#!/bin/sh
# GPU build, tests, sanitizers and benchmarks for a GPU machine that has only
# CUDA and a few system libraries (docs/gpu.md).
#
#   scripts/device.sh build    HERE: configure and build for sm_90 into
#                              build-gpu/ with PATINA_TEST_SHARED (tests,
#                              benchmarks and the lab link one shared library),
#                              then stage what the GPU machine needs into
#                              .carry/stage: the binaries, libpatina.so, the
#                              CTest files and the shared libraries it lacks
#                              (LMDB, cmocka, TurboJPEG ...), and print the
#                              `run` call to make.
#   scripts/device.sh remote   ON THE GPU MACHINE (repo root of its copy): runs
#                              STEPS (default "tests sanitize bench") and writes
#                              the logs under $OUT (or ./device-out):
#                                tests     ctest -L gpu (GPU tests and the lab's
#                                          validation), every result verbose
#                                sanitize  compute-sanitizer memcheck with
#                                          --leak-check full, racecheck and
#                                          synccheck on each GPU test (quick
#                                          mode; SANITIZE_TESTS and
#                                          SANITIZE_TOOLS choose)
#                                bench     bench_cedd, bench_lbp, bench_glcm,
#                                          bench_knn with peers (PyTorch,
#                                          scikit-image) where they run; each
#                                          is also a step of its own
#                                          (bench_lbp ...)
#                                bench_rootsift  rootsift extraction on the
#                                          CPU cores there (VLFeat; 1 thread
#                                          and all), a step of its own
#                                bench_signature  signature extraction:
#                                          CPU 1 thread, all threads, GPU,
#                                          records compared (a step of its own)
#                                bench_identify_match  CPU matching of one
#                                          query against 4096 references
#                                bench_identify_gpu  the fused GPU matcher
#                                          beside cuBLAS (lab) and PyTorch,
#                                          capacity, one query end to end
#                                bench_multigpu  every GPU of the host in
#                                          one process against one GPU
#                                lab_identify  the lab's timing of the
#                                          paper's cuBLAS path
#                                bench_sqfd  SQFD: the 1M synthetic scan table
#                                          (CPU, GPU kernel and end to end, the
#                                          paper's block-wise kernel, PyTorch,
#                                          OpenCV), 100k with 32 pivots at
#                                          alpha 0.2, the samples/ collection
#                                bench_sqfd_real  SQFD on a real collection
#                                          of 72k images (scripts/sqfd-real.sh
#                                          remote: the carried .carry/sqfd-real
#                                          originals and their variants,
#                                          indexed on the GPU, 32 pivots,
#                                          bench_sqfd --collection); needs
#                                          `scripts/sqfd-real.sh prepare` here
#                                          and .carry/sqfd-real in the carry
#                                lab_sqfd  the lab's block-wise timing
#                                bench_cluster  bench/cluster/run.sh: the
#                                          in-process engine, the cluster path
#                                          (staged nats-server, GPU shards,
#                                          front end), CPU shards, recovery,
#                                          write-to-visible: one table
#                                e2e       bench_pipeline: every family end to
#                                          end on JPEGs cut from samples/, one
#                                          table per size (E2E_SIZES: vga 1024
#                                          12mp), PIL/OpenCV decoding beside
#                                bench_video  video indexed end to end
#                                          (bench_video --file VIDEO, default
#                                          the staged 1080p30.mkv; CPU, GPU
#                                          and NVDEC rows); needs VSTAGE=1
#                              BENCH_ARGS adds arguments to every benchmark.
#                              VSTAGE=1 runs the steps on .carry/vstage
#                              (build-video) instead of .carry/stage.
#                                asan      the GPU tests built with AddressSanitizer
#                                          (host code; `build-asan` stages them)
#   scripts/device.sh build-asan   HERE: the GPU tests with AddressSanitizer and
#                              UBSan on the host code (C files), staged into
#                              .carry/asan with the sanitizer runtimes.
#   scripts/device.sh source   ON THE GPU MACHINE, without a staged build:
#                              builds there from the carried Debian packages
#                              (scripts/device.sh deps, here, puts them in
#                              .carry/deps), then `remote`.
#   scripts/device.sh deps     HERE: downloads those packages into .carry/deps.
#   scripts/device.sh ffmpeg   HERE: builds a small FFmpeg (Debian's source of
#                              the FFmpeg the project links, the same version
#                              and sonames: H.264, HEVC, MPEG-4 and MPEG-2
#                              decoders, the NVDEC hwaccels, the usual
#                              containers, libswscale; no external codec) into
#                              .carry/ffmpeg: Debian's FFmpeg with its codecs is
#                              ~170 MB of libraries, over the carry limit.
#   scripts/device.sh build-video  HERE: the library and bench_video with
#                              video on, linked against .carry/ffmpeg, staged
#                              into .carry/vstage with the libraries they
#                              need; run it there with VSTAGE=1 (below).
#   scripts/device.sh wheels   HERE: downloads the peers' wheels the GPU machine
#                              lacks into .carry/wheels (WHEELS: faiss-cpu,
#                              the default, or "kornia kornia_rs"); `remote`
#                              installs them there into .carry/pylib (no
#                              dependencies: it has numpy) and puts that on
#                              PYTHONPATH.
#
# The staged build holds this machine's absolute paths (CTest files, test
# data paths baked into the tests), so `remote` links the original source
# path to the copy and the original build path to the stage when those paths
# do not exist there.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build-gpu
STAGE=$ROOT/.carry/stage
[ "${VSTAGE:-0}" = 0 ] || { BUILD=$ROOT/build-gpu-video; STAGE=$ROOT/.carry/vstage; }
DEPS=$ROOT/.carry/deps
MODE=${1:-build}

# Libraries a minimal CUDA image has; everything else the binaries need is
# staged.
SYSTEM_LIBS='linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libgcc_s|libstdc\+\+|libz\.so|libcudart|libcuda\.so|libnvjpeg|libcublas'
# Debian packages that `source` builds against (headers, .pc files, libraries).
DEB_PKGS='liblmdb-dev liblmdb0 libcmocka-dev libcmocka0 libturbojpeg0-dev libturbojpeg0
libjpeg62-turbo-dev libjpeg62-turbo libpng-dev libpng16-16 zlib1g-dev pkgconf pkgconf-bin libpkgconf3
libvlfeat-dev libvlfeat1 libgomp1'

# A small FFmpeg for the GPU machine, from Debian's source of the version
# the project links (bookworm's 5.1): same sonames and ABI, only the decoders
# a camera or screen recording uses and NVDEC's hwaccels (loaded by FFmpeg
# from the driver's libnvcuvid at run time; headers: libffmpeg-nvenc-dev).
ffmpeg_min() {
    out=$ROOT/.carry/ffmpeg
    work=${TMPDIR:-/tmp}/patina-ffmpeg
    mkdir -p "$work"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q nasm libffmpeg-nvenc-dev dpkg-dev > "$work/apt.log" 2>&1 ||
        { echo "ffmpeg: apt-get install failed (see $work/apt.log)" >&2; exit 1; }
    printf 'deb-src http://deb.debian.org/debian bookworm main\ndeb-src http://deb.debian.org/debian-security bookworm-security main\n' \
        > "$work/src.list"
    aptsrc="-o Dir::Etc::sourcelist=$work/src.list -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0"
    ver=$(dpkg-query -W -f '${source:Version}' libavcodec-dev 2>/dev/null || true)
    # shellcheck disable=SC2086
    (cd "$work" && apt-get $aptsrc update -qq && apt-get $aptsrc source --download-only "ffmpeg${ver:+=$ver}") \
        > "$work/src.log" 2>&1 || { echo "ffmpeg: apt-get source failed (see $work/src.log)" >&2; exit 1; }
    rm -rf "$work/src" && mkdir -p "$work/src"
    tar xf "$(ls "$work"/ffmpeg_*.orig.tar.* | head -1)" -C "$work/src" --strip-components=1
    (cd "$work/src" && ./configure --prefix="$out" --enable-shared --disable-static --disable-programs --disable-doc \
        --disable-everything --disable-autodetect --disable-network --disable-avdevice --disable-avfilter \
        --disable-postproc --disable-swresample --enable-ffnvcodec --enable-nvdec \
        --enable-hwaccel=h264_nvdec,hevc_nvdec --enable-decoder=h264,hevc,rawvideo,mpeg4,mpeg2video \
        --enable-parser=h264,hevc,mpeg4video,mpegvideo \
        --enable-demuxer=mov,matroska,h264,hevc,nut,yuv4mpegpipe,rawvideo,mpegts,avi \
        --enable-protocol=file,pipe --enable-bsf=h264_mp4toannexb,hevc_mp4toannexb --enable-swscale &&
        make -j"$(nproc)" && rm -rf "$out" && make install) > "$work/build.log" 2>&1 ||
        { echo "ffmpeg: build failed (see $work/build.log)" >&2; exit 1; }
    echo "ffmpeg: $(du -sh "$out/lib" | cut -f1) of libraries in $out/lib"
}

configure() { # configure DIR [extra cmake args...]
    dir=$1
    shift
    # video off: FFmpeg and its codecs are ~200 MB of shared libraries, over the carry limit; the
    # GPU machine has no video path of its own yet (docs/video.md)
    cmake -S "$ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DPATINA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
        -DPATINA_WERROR=ON -DPATINA_CUDA_LINEINFO=OFF -DPATINA_TEST_SHARED=ON -DPATINA_VIDEO="${VIDEO:-OFF}" "$@"
}

# The targets a GPU run needs: the shared library, the CLI, patina-variant
# (bench_sqfd_real's copies), the GPU tests, the benchmarks and the lab.
# From the list the configure step writes (CMakeLists.txt), the same for
# the Makefile and the Ninja generators.
gpu_targets() { # gpu_targets BUILD_DIR
    [ -s "$1/patina-targets.txt" ] || { echo "device.sh: $1/patina-targets.txt missing (configure first)" >&2; exit 1; }
    grep -E '^(patina|patina_cli|patina_variant|test_.*_gpu|bench_.*|lab_.*)$' "$1/patina-targets.txt" | tr '\n' ' '
}

build() {
    jobs=$(nproc 2>/dev/null || echo 2)
    configure "$BUILD"
    # shellcheck disable=SC2046
    cmake --build "$BUILD" -j"$jobs" --target ${TARGETS:-$(gpu_targets "$BUILD")}
    rm -rf "$STAGE"
    mkdir -p "$STAGE/lib"
    # The build tree without objects and CMake's scratch: binaries, the
    # library and the CTest files.
    (cd "$BUILD" && find . -type f ! -name '*.o' ! -name '*.a' ! -path '*/CMakeFiles/*' ! -name 'Makefile' \
        ! -name '*.ninja' ! -name 'CMakeCache.txt' ! -name 'cmake_install.cmake' -print) |
        while read -r f; do
            mkdir -p "$STAGE/$(dirname "$f")"
            cp -p "$BUILD/$f" "$STAGE/$f"
        done
    (cd "$BUILD" && for l in libpatina.so*; do [ -L "$l" ] && cp -P "$l" "$STAGE/"; done; true)
    cp "$BUILD/CMakeCache.txt" "$STAGE/CMakeCache.txt" # remote reads the source path from it
    for bin in $(find "$STAGE" -type f -perm -u+x) "$STAGE"/libpatina.so.*; do
        ldd "$bin" 2>/dev/null | awk '/=> \// {print $1, $3}' | while read -r name path; do
            echo "$name" | grep -Eq "^($SYSTEM_LIBS)" && continue
            case $name in libpatina.so*) continue ;; esac
            [ -e "$STAGE/lib/$name" ] || cp -L "$path" "$STAGE/lib/$name"
        done
    done
    # video (build-video): the small FFmpeg's libraries came with the binaries (ldd); the video
    [ "${VSTAGE:-0}" = 0 ] || { echo "libraries staged: $(ls "$STAGE/lib" | tr '\n' ' ')"; return 0; }
    # the cluster benchmark's server: the GPU machine has no NATS (libnats.so
    # comes with the binaries above, by ldd); 18 MB, 5.3 MB as xz (the carry
    # limit), unpacked by `remote`
    nats=$ROOT/.venv-nats/bin/nats-server
    [ -x "$nats" ] || nats=$(command -v nats-server || true)
    if [ -n "$nats" ]; then
        mkdir -p "$STAGE/bin"
        rm -f "$STAGE/bin/nats-server"
        xz -9 -c "$nats" > "$STAGE/bin/nats-server.xz"
    fi
    echo "libraries staged: $(ls "$STAGE/lib" | tr '\n' ' ')"
    tree_kb=$(cd "$ROOT" && git ls-files -co --exclude-standard -z | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    stage_kb=$(du -sk "$ROOT/.carry" | cut -f1)
    carry='".carry"'
    samples_kb=0
    if [ -d "$ROOT/samples" ]; then
        for d in $(cd "$ROOT" && du -sk samples/*/ 2>/dev/null | sort -n | cut -f2); do
            kb=$(du -sk "$ROOT/$d" | cut -f1)
            [ $((tree_kb + stage_kb + samples_kb + kb)) -lt 64000 ] || break
            samples_kb=$((samples_kb + kb))
            carry="$carry, \"${d%/}\""
        done
    fi
    echo "size: working tree ${tree_kb} KiB + .carry ${stage_kb} KiB + samples ${samples_kb} KiB (limit 65536 KiB)"
    cat <<EOF

Now run, with the device tool:
  run(kind="nvidia-h100-x1", carry=[$carry], timeout_s=600,
      command="STEPS='tests sanitize bench' sh scripts/device.sh remote")
EOF
}

build_asan() {
    dir=$ROOT/build-gpu-asan
    configure "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPATINA_SANITIZE=ON -DPATINA_LAB=OFF -DPATINA_WERROR=OFF
    # shellcheck disable=SC2046
    cmake --build "$dir" -j"$(nproc 2>/dev/null || echo 2)" --target $(cd "$ROOT/tests/gpu" && ls test_*.c | sed 's/\.c$//')
    rm -rf "$ROOT/.carry/asan"
    mkdir -p "$ROOT/.carry/asan"
    cp -P "$dir"/libpatina.so* "$ROOT/.carry/asan/"
    cp "$dir"/tests/test_*_gpu "$ROOT/.carry/asan/"
    for l in libasan.so.8 libubsan.so.1; do cp -L "/lib/x86_64-linux-gnu/$l" "$ROOT/.carry/asan/"; done
    echo "asan stage: $(du -sh "$ROOT/.carry/asan" | cut -f1)"
}

step_asan() {
    [ -d "$ROOT/.carry/asan" ] || { echo "no .carry/asan (scripts/device.sh build-asan)"; return; }
    echo "== GPU tests under AddressSanitizer + UBSan (host code)"
    # libnvjpeg's own initialisers allocate when dlopen loads it (api_load),
    # and so do glibc's compatibility condition variables it uses: that
    # memory stays with the library, not ours to free
    printf 'leak:api_load\nleak:pthread_cond_broadcast\n' > "$OUT/lsan.supp"
    for t in "$ROOT"/.carry/asan/test_*_gpu; do
        # the CUDA driver maps memory where ASan keeps its shadow gap
        LD_LIBRARY_PATH="$ROOT/.carry/asan:$STAGE/lib" ASAN_OPTIONS=protect_shadow_gap=0 \
            LSAN_OPTIONS="suppressions=$OUT/lsan.supp:print_suppressions=0" PATINA_TEST_QUICK=1 \
            timeout 200 "$t" > "$OUT/asan-one.log" 2>&1 || rc=1
        { echo "=== $(basename "$t")"; grep -vE "^\[ (RUN|  *OK) " "$OUT/asan-one.log" | tail -30; } >> "$OUT/asan.log"
        echo "$(basename "$t"): $(grep -cE "ERROR: (Address|Leak)Sanitizer|runtime error" "$OUT/asan-one.log") sanitizer reports; $(grep -E "PASSED|FAILED" "$OUT/asan-one.log" | tail -1)"
    done
    rm -f "$OUT/asan-one.log" "$OUT/lsan.supp"
}

wheels() {
    mkdir -p "$ROOT/.carry/wheels"
    # WHEELS: which (faiss-cpu for bench_knn's peer; "kornia kornia_rs" for
    # bench_rootsift's GPU SIFT peer): carry one set at a time (size)
    # shellcheck disable=SC2086
    (cd "$ROOT/.carry/wheels" && pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 ${WHEELS:-faiss-cpu})
    echo "wheels: $(ls "$ROOT/.carry/wheels" | tr '\n' ' ')"
}

# The carried peer wheels, installed for this run (remote).
peer_wheels() {
    ls "$ROOT"/.carry/wheels/*.whl >/dev/null 2>&1 || return 0
    python3 -m pip install -q --no-deps --no-index --target "$ROOT/.carry/pylib" "$ROOT"/.carry/wheels/*.whl \
        > "$OUT/wheels.log" 2>&1 || { echo "peer wheels: install failed (see wheels.log)"; return 0; }
    export PYTHONPATH="$ROOT/.carry/pylib${PYTHONPATH:+:$PYTHONPATH}"
}

deps() {
    mkdir -p "$DEPS/debs"
    # shellcheck disable=SC2086
    (cd "$DEPS/debs" && apt-get download -q $DEB_PKGS)
    for d in "$DEPS"/debs/*.deb; do dpkg -x "$d" "$DEPS/root"; done
    rm -rf "$DEPS/debs"
    echo "deps: $(du -sh "$DEPS" | cut -f1) in $DEPS/root"
}

# Links the staged build's absolute paths (source and build trees of the
# machine that built it) to this copy.
link_paths() {
    src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$STAGE/CMakeCache.txt")
    bld=$(sed -n 's/^CMAKE_CACHEFILE_DIR:INTERNAL=//p' "$STAGE/CMakeCache.txt")
    if [ -n "$src" ] && [ "$src" != "$ROOT" ] && [ ! -e "$src" ]; then
        mkdir -p "$(dirname "$src")"
        ln -s "$ROOT" "$src"
        echo "linked $src -> $ROOT"
    fi
    if [ -n "$bld" ] && [ ! -e "$bld" ]; then
        ln -s "$STAGE" "$bld"
        echo "linked $bld -> $STAGE"
    fi
    BUILD=$bld
    # the python3 the tests were configured with (this machine's, e.g. a
    # pyenv shim): the GPU machine's python3 under that path when absent
    py=$(command -v python3 || true)
    for p in $(sed -n 's/^PATINA_PYTHON3[A-Z_]*:FILEPATH=//p' "$STAGE/CMakeCache.txt" | sort -u); do
        if [ -n "$py" ] && [ ! -e "$p" ]; then
            mkdir -p "$(dirname "$p")"
            ln -s "$py" "$p"
            echo "linked $p -> $py"
        fi
    done
}

step_tests() {
    echo "== ctest -L gpu"
    # TESTS_REGEX: only the tests whose names match (ctest -R)
    (cd "$BUILD" && timeout "${TESTS_TIMEOUT:-300}" ctest -L gpu ${TESTS_REGEX:+-R "$TESTS_REGEX"} --output-on-failure -V) \
        > "$OUT/ctest-gpu.log" 2>&1 || rc=1
    grep -E "^[0-9]+/[0-9]+ Test|tests passed|tests failed|PASSED|FAILED|SKIPPED|differing" "$OUT/ctest-gpu.log" | tail -40
}

step_sanitize() {
    echo "== compute-sanitizer (quick mode): memcheck --leak-check full, racecheck, synccheck"
    : > "$OUT/sanitizer.log"
    for t in ${SANITIZE_TESTS:-$(cd "$BUILD/tests" && ls test_*_gpu 2>/dev/null)}; do
        for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
            [ "$tool" = memcheck ] && tool="memcheck --leak-check full"
            # racecheck follows every shared-memory access: the tiny set;
            # test_nvjpeg_gpu's kernels are CEDD's (racechecked by
            # test_cedd_gpu) and nvJPEG's own
            quick=1
            if [ "$tool" = racecheck ]; then
                quick=2
                [ "$t" = test_nvjpeg_gpu ] && continue
            fi
            # racecheck of the longer tests: one test at a time (cmocka's filter, their argument), with
            # a longer limit: test_rootsift_gpu's synthetic cases alone take about 210 s under racecheck
            # on an H200, test_knn_gpu's wgmma batches ~70 s each, test_identify_gpu's views over 200 s
            filters="" limit=150
            if [ "$tool" = racecheck ]; then
                case $t in
                test_rootsift_gpu) filters="test_synthetic test_photos" limit=330 ;;
                test_knn_gpu)
                    filters="test_random test_refusals test_ties test_range test_live test_distances"
                    filters="$filters test_distances_wgmma test_filter_batches test_filter_domain test_chunked"
                    filters="$filters test_streamed test_threads" ;;
                test_identify_gpu) filters="test_random test_real test_cache test_threads test_views test_views_sets test_nn" limit=330 ;;
                esac
            fi
            for f in ${filters:--}; do
                [ "$f" = - ] && f=""
                # shellcheck disable=SC2086
                PATINA_TEST_QUICK=$quick timeout $limit compute-sanitizer --tool $tool --error-exitcode 3 \
                    "$BUILD/tests/$t" $f > "$OUT/sanitizer-one.log" 2>&1 || rc=1
                { echo "=== $t $f: $tool"; grep -vE "^\[ (RUN|  *OK) " "$OUT/sanitizer-one.log" | tail -40; } >> "$OUT/sanitizer.log"
                echo "$t $f $tool: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY" "$OUT/sanitizer-one.log" | tr '\n' ' ') $(grep -E "PASSED|FAILED" "$OUT/sanitizer-one.log" | tail -1)"
            done
        done
    done
    rm -f "$OUT/sanitizer-one.log"
}

# One benchmark with its arguments (BENCH_ARGS adds to them); its log is
# $OUT/NAME.log (NAME: the benchmark and a suffix when given).
bench_one() { # bench_one NAME SUFFIX ARGS...
    name=$1 suffix=$2
    shift 2
    [ -x "$BUILD/bench/$name" ] || { echo "no $name"; return; }
    echo "== $name $* ${BENCH_ARGS:-}"
    # shellcheck disable=SC2086
    (cd "$ROOT" && PATINA_PYTHON=python3 timeout "${BENCH_TIMEOUT:-280}" "$BUILD/bench/$name" "$@" ${BENCH_ARGS:-}) \
        > "$OUT/$name$suffix.log" 2>&1 || rc=1
    cat "$OUT/$name$suffix.log"
}

step_bench_cedd() { bench_one bench_cedd "" --quick; }
# The search table of docs/search.md: 1M and 10M rows, batches 1/256/4096,
# k 1/10/100, with the peers.
step_bench_knn() { BENCH_TIMEOUT=${BENCH_TIMEOUT:-500} bench_one bench_knn ""; }
# The other families' rows of that table: 1M rows, k = 10, with their peers
# (KNN_FAMILIES chooses; suffix = the family's position).
step_bench_knn_families() {
    i=0
    for f in ${KNN_FAMILIES:-lbp8 lbp8:norm=l1,distance=hellinger glcm haralick}; do
        i=$((i + 1))
        BENCH_TIMEOUT=${BENCH_TIMEOUT:-240} bench_one bench_knn "_f$i" --family "$f" --sizes 1000000 \
            --queries 1,256,4096 --ks 10 --cpu-max 1e6
    done
}
step_bench_lbp() {
    bench_one bench_lbp ""
    # the throughput rows of the earlier notes: 1024 images of 1024^2 per launch
    bench_one bench_lbp _1024 --batched-only --quick --no-peers --batch 1024 --e2e 0
}
step_bench_glcm() { bench_one bench_glcm ""; }
# CPU only (VLFeat): extraction throughput on this machine's cores.
step_bench_rootsift() { bench_one bench_rootsift ""; }
step_bench_video() {
    v=${VIDEO_FILE:-$STAGE/video/1080p30.mkv}
    bench_one bench_video "" --file "$v" --devices cpu,gpu
}
# CPU identification matching (one query against references), 1 thread and all.
step_bench_signature() {
    bench_one bench_signature ""
    bench_one bench_signature _grid --spec signature:sampling=grid,samples=4000,seeds=800,k=128 --sizes 512,2048
}

step_bench_identify_match() { bench_one bench_identify_match "" 4096; }
# One process on every GPU against one GPU: identify, CEDD k-NN, SQFD (on a
# one-GPU machine the two slices of "0,0", and the table says so).
step_bench_multigpu() { BENCH_TIMEOUT=${BENCH_TIMEOUT:-500} bench_one bench_multigpu ""; }
# Identification on the GPU: the fused kernel beside the lab's cuBLAS path
# and PyTorch (one table), then the capacity row and one query end to end.
step_bench_identify_gpu() {
    bench_one bench_identify_gpu ""
    BENCH_TIMEOUT=400 bench_one bench_identify_gpu _e2e --no-peers --capacity --e2e 1048576
}
step_lab_identify() {
    [ -x "$BUILD/lab/identify/lab_identify" ] || { echo "no lab_identify"; return; }
    echo "== lab_identify (the paper's cuBLAS 2-NN, batch 256/1024, beside the fused kernel)"
    "$BUILD/lab/identify/lab_identify" 65536 > "$OUT/lab_identify.log" 2>&1 || rc=1
    cat "$OUT/lab_identify.log"
}
# SQFD (docs/signature.md "GPU"): the synthetic 1M collection (40 centroids,
# alpha 0.2) with the peers; 100k with 32 pivots (the CPU filters' pruning
# beside the GPU scan); the sample photographs as a collection when carried.
step_bench_sqfd() {
    BENCH_TIMEOUT=${BENCH_TIMEOUT:-400} bench_one bench_sqfd "" --synthetic 1000000 --pivots 0 --queries 64 \
        --scan-queries 2 --alpha 0.2
    BENCH_TIMEOUT=${BENCH_TIMEOUT:-300} bench_one bench_sqfd _pivots --synthetic 100000 --pivots 32 --queries 64 \
        --scan-queries 4 --alpha 0.2 --no-peers
    if [ -d "$ROOT/samples" ] && [ -x "$BUILD/patina" ]; then
        rm -rf "$OUT/sqfd-samples.patina"
        "$BUILD/patina" index "$OUT/sqfd-samples.patina" "$ROOT/samples" -f signature > "$OUT/sqfd-index.log" 2>&1 &&
            BENCH_TIMEOUT=${BENCH_TIMEOUT:-200} bench_one bench_sqfd _samples --collection "$OUT/sqfd-samples.patina" \
                --queries 16 --scan-queries 16 --pivots 8 --no-peers
        rm -rf "$OUT/sqfd-samples.patina"
    fi
}
# The filter strategies on 1M synthetic signatures (32 pivots; the table takes about a minute)
step_bench_sqfd_1m() {
    BENCH_TIMEOUT=${BENCH_TIMEOUT:-500} bench_one bench_sqfd _1m --synthetic 1000000 --pivots 32 --queries 64 \
        --scan-queries 2 --alpha 0.2 --no-peers
}
# SQFD on a real collection of ALOI's size: the carried originals
# (scripts/sqfd-real.sh prepare) and their variants up to 72,000 images,
# indexed with signature:k=40,alpha=0.2 on the GPU with 32 pivots, then
# bench_sqfd --collection; the log is $OUT/bench_sqfd_real.log. About 3-5
# minutes on 16 cores (SQFD_REAL_TARGET: another image count).
step_bench_sqfd_real() {
    [ -d "$ROOT/.carry/sqfd-real" ] || {
        echo "no .carry/sqfd-real carried (scripts/sqfd-real.sh prepare, here): bench_sqfd_real skipped"
        return
    }
    echo "== bench_sqfd_real (scripts/sqfd-real.sh remote)"
    BUILD=$BUILD OUT=$OUT TARGET=${SQFD_REAL_TARGET:-72000} timeout "${BENCH_TIMEOUT:-560}" \
        bash "$ROOT/scripts/sqfd-real.sh" remote || rc=1
}
step_lab_sqfd() {
    [ -x "$BUILD/lab/sqfd/lab_sqfd" ] || { echo "no lab_sqfd"; return; }
    echo "== lab_sqfd (the paper's block-wise kernel beside the production scan, 100k x 40 centroids)"
    "$BUILD/lab/sqfd/lab_sqfd" > "$OUT/lab_sqfd.log" 2>&1 || rc=1
    cat "$OUT/lab_sqfd.log"
}
step_bench() {
    step_bench_cedd
    step_bench_lbp
    step_bench_glcm
    step_bench_knn
}

# The cluster benchmark (bench/cluster/run.sh): NATS (the staged server) +
# GPU shards + the front end's code against the in-process engine; its
# table in bench_cluster.log. REFS, CPU_REFS, REPS ... as run.sh reads them.
step_bench_cluster() {
    [ -x "$BUILD/bench/bench_cluster" ] || { echo "no bench_cluster (built without libnats)"; return; }
    if [ ! -x "$STAGE/bin/nats-server" ] && [ -f "$STAGE/bin/nats-server.xz" ]; then
        xz -dc "$STAGE/bin/nats-server.xz" > "$STAGE/bin/nats-server" && chmod +x "$STAGE/bin/nats-server"
    fi
    echo "== bench/cluster/run.sh"
    (cd "$ROOT" && NATS_SERVER="$STAGE/bin/nats-server" OUT="$OUT/cluster" timeout "${BENCH_TIMEOUT:-580}" \
        sh bench/cluster/run.sh "$BUILD") > "$OUT/bench_cluster.log" 2>&1 || rc=1
    cat "$OUT/bench_cluster.log"
}

step_e2e() {
    [ -d "$ROOT/samples" ] || { echo "no samples/ carried: e2e skipped"; return; }
    : > "$OUT/e2e.log"
    # one table per image size (E2E_SIZES picks some: vga 1024 12mp), with
    # PIL and OpenCV decoding the same files when python3 has them
    for size in ${E2E_SIZES:-vga 1024 12mp}; do
        case $size in
            vga) dims=640x480 files=${E2E_FILES_VGA:-2048} t=300 ;;
            1024) dims=1024x1024 files=${E2E_FILES:-1024} t=400 ;;
            12mp) dims=4000x3000 files=${E2E_FILES_12MP:-128} t=400 ;;
            *) echo "e2e: unknown size $size (vga, 1024, 12mp)"; rc=1; continue ;;
        esac
        echo "== bench_pipeline --size $dims --files $files --nvjpeg --devices cpu,gpu,hybrid (cut from samples/)" \
            | tee -a "$OUT/e2e.log"
        (cd "$ROOT" && timeout $t "$BUILD/bench/bench_pipeline" --nvjpeg --devices cpu,gpu,hybrid \
            --size $dims --files "$files" --peer bench/decode_peers.py) > "$OUT/e2e-$size.log" 2>&1 || rc=1
        cat "$OUT/e2e-$size.log" | tee -a "$OUT/e2e.log"
    done
}

remote() {
    OUT=${OUT:-$ROOT/device-out}
    mkdir -p "$OUT"
    [ -d "$STAGE" ] || { echo "no .carry/stage: carry it (scripts/device.sh build), or use 'source'" >&2; exit 1; }
    link_paths
    export LD_LIBRARY_PATH="$STAGE/lib:$STAGE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    [ ! -d "$STAGE/video" ] || export PATINA_VIDEO_FIXTURES="$STAGE/video"
    peer_wheels
    run_steps
}

# The STEPS in order (order = priority: a command stopped at its limit
# returns every log written so far); sets rc.
run_steps() {
    rc=0
    { nvidia-smi; nvidia-smi -q -d CLOCK,POWER,PCI 2>/dev/null | head -60; } > "$OUT/nvidia-smi.txt" 2>&1 || true
    head -12 "$OUT/nvidia-smi.txt"
    for s in ${STEPS:-tests sanitize bench}; do
        case $s in
        tests) step_tests ;;
        sanitize) step_sanitize ;;
        bench) step_bench ;;
        bench_cedd | bench_lbp | bench_glcm | bench_knn | bench_knn_families | bench_rootsift | bench_signature | bench_identify_match | bench_identify_gpu | bench_multigpu | bench_video | \
            lab_identify | bench_sqfd | bench_sqfd_1m | bench_sqfd_real | lab_sqfd | bench_cluster) "step_$s" ;;
        e2e) step_e2e ;;
        asan) step_asan ;;
        *) echo "unknown step $s" >&2; rc=2 ;;
        esac
    done
    return $rc
}

# Builds on the GPU machine itself from the carried Debian packages, then
# runs `remote` on that build.
source_build() {
    [ -d "$DEPS/root" ] || { echo "no .carry/deps: run 'scripts/device.sh deps' here and carry .carry" >&2; exit 1; }
    R=$DEPS/root
    export PATH="$R/usr/bin:$PATH"
    export PKG_CONFIG_LIBDIR="$R/usr/lib/x86_64-linux-gnu/pkgconfig:$R/usr/share/pkgconfig"
    export PKG_CONFIG_SYSROOT_DIR="$R"
    export LD_LIBRARY_PATH="$R/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    gen=
    command -v ninja >/dev/null && gen="-GNinja"
    # shellcheck disable=SC2086
    # VLFeat has no .pc file: found by path under the unpacked root.
    configure "$BUILD" $gen -DPKG_CONFIG_EXECUTABLE="$R/usr/bin/pkgconf" -DCMAKE_PREFIX_PATH="$R/usr"
    # shellcheck disable=SC2046
    cmake --build "$BUILD" -j"$(nproc)" --target $(gpu_targets "$BUILD")
    mkdir -p "$STAGE"
    cp "$BUILD/CMakeCache.txt" "$STAGE/CMakeCache.txt"
    OUT=${OUT:-$ROOT/device-out}
    mkdir -p "$OUT"
    run_steps
}

case $MODE in
build) build ;;
build-video)
    [ -d "$ROOT/.carry/ffmpeg/lib/pkgconfig" ] || { echo "no .carry/ffmpeg: run 'scripts/device.sh ffmpeg' first" >&2; exit 1; }
    export PKG_CONFIG_PATH="$ROOT/.carry/ffmpeg/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    VSTAGE=1 BUILD=$ROOT/build-gpu-video STAGE=$ROOT/.carry/vstage VIDEO=ON
    TARGETS="patina bench_video test_video_gpu"
    build
    # the test's videos and the benchmark's, encoded here (the small FFmpeg has no encoders): Debian's
    # FFmpeg first on the library path, over the binaries' run path to .carry/ffmpeg
    mkdir -p "$STAGE/video"
    LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu "$BUILD/tests/test_video_gpu" --write "$STAGE/video"
    (cd "$STAGE/video" && LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu TMPDIR=$STAGE/video \
        "$BUILD/bench/bench_video" --seconds 10 --size 1920x1080 --fps 30 --devices cpu --no-nvdec --no-live > /dev/null &&
        mv bench_video_1920x1080_30.mkv 1080p30.mkv)
    echo "staged: $(du -sh "$STAGE" | cut -f1) in $STAGE (carry .carry/vstage; VSTAGE=1 there)" ;;
ffmpeg) ffmpeg_min ;;
build-asan) build_asan ;;
remote) remote ;;
deps) deps ;;
wheels) wheels ;;
source) source_build ;;
*) echo "usage: scripts/device.sh [build|build-video|ffmpeg|build-asan|remote|deps|wheels|source]" >&2; exit 2 ;;
esac
