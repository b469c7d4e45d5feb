#!/bin/bash
# SQFD on a real collection of ALOI's size (issue 18, docs/signature.md
# "Pivot tables" -> "Benchmark"): the real photographs and textures of
# ../shared/data (photos.sh, textures.sh), each with deterministic augmented
# copies up to TARGET images (72,000: ALOI's 72k), indexed as signatures
# (k=40, alpha 0.2) with a 32-pivot table, and searched by bench_sqfd
# --collection (scan on the CPU and the GPU, the pivot filters' strategies,
# their pruning and times).
#
#   scripts/sqfd-real.sh prepare   HERE: materialises the originals (photos.sh
#                                  and textures.sh; ~900 MB of Debian packages
#                                  in their scratch folder) and writes each,
#                                  downscaled to a short side of SIDE (192)
#                                  pixels (never enlarged) as a JPEG of
#                                  quality QUALITY (75), into
#                                  .carry/sqfd-real/GROUP/NAME.jpg (GROUP: the
#                                  source folder; carried to the GPU machine).
#                                  DATA (default $TMPDIR/patina-real) holds the
#                                  full-size originals.
#   scripts/sqfd-real.sh remote    ON THE GPU MACHINE (scripts/device.sh step
#                                  bench_sqfd_real) or here: TARGET (72000)
#                                  images from .carry/sqfd-real -- the
#                                  originals and ceil(TARGET/N) - 1 variants of
#                                  each (patina-variant: crop, scale, JPEG
#                                  quality, fixed per original and copy) made
#                                  in parallel -- then `patina index` with
#                                  -f SPEC --pivots 32 (extraction on the GPU
#                                  when nvidia-smi sees one, INDEX_DEVICE
#                                  forces cpu or gpu; a failed GPU run is
#                                  redone on the CPU, logged), then
#                                  bench_sqfd --collection --queries 64
#                                  --scan-queries 8 --pivots 32 (it loads the
#                                  stored table). Logs in $OUT
#                                  (bench_sqfd_real.log: timings and the
#                                  table); images and collection in WORK
#                                  (default $TMPDIR/sqfd-real), deleted at the
#                                  end (KEEP=1 keeps them). BUILD: where
#                                  patina, patina-variant and bench/bench_sqfd
#                                  are (default ./build). BENCH_ARGS adds to
#                                  bench_sqfd's arguments.
#
# Originals are numbered 1..N in byte order of GROUP/NAME; copy j (1..V) of
# original i is GROUP/NAME~vJJ.jpg, its parameters three draws of a MINSTD
# stream seeded by (i, j) (integer arithmetic exact in doubles: the same in
# mawk and gawk): crop 0..15 % of each side, scale 0.60..1.40 (bilinear),
# JPEG quality 40..95. The collection is the same on every machine; its
# signatures are too (extraction is deterministic, GPU and CPU records are
# identical).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=$ROOT/.carry/sqfd-real
SPEC=${SPEC:-signature:k=40,alpha=0.2}
MODE=${1:-}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

prepare() {
    local data=${DATA:-${TMPDIR:-/tmp}/patina-real} side=${SIDE:-192} q=${QUALITY:-75}
    local shared=$ROOT/../shared/data
    [ -d "$shared" ] || shared=/work/shared/data
    command -v convert >/dev/null || { echo "needs imagemagick (apt-get install -y unzip imagemagick)" >&2; exit 1; }
    OUT=$data/photos bash "$shared/photos.sh"
    OUT=$data/textures bash "$shared/textures.sh"
    rm -rf "$SRC"
    mkdir -p "$SRC"
    # one job per original: GROUP/NAME.jpg, NAME = the file name without its
    # extension, characters other than [A-Za-z0-9._-] as _; a name taken
    # by another original of the group gets the extension appended
    (cd "$data" && find photos textures -mindepth 2 -type f | LC_ALL=C sort) |
        while IFS= read -r f; do
            g=$(basename "$(dirname "$f")")
            n=$(basename "$f")
            ext=${n##*.}
            n=$(printf '%s' "${n%.*}" | tr -c 'A-Za-z0-9._-' '_')
            [ -e "$SRC/$g/$n.jpg" ] && n=${n}_$ext
            mkdir -p "$SRC/$g"
            # first frame, alpha flattened on white, 8-bit sRGB, short side
            # <= side, no metadata
            convert "$data/${f}[0]" -auto-orient -background white -alpha remove -alpha off -colorspace sRGB \
                -type TrueColor -depth 8 -resize "${side}x${side}^>" -strip -sampling-factor 4:2:0 \
                -quality "$q" "$SRC/$g/$n.jpg"
        done
    echo "per group (bytes, as carried):"
    (cd "$SRC" && for g in *; do
        printf '  %-18s %5d images %9d bytes\n' "$g" "$(find "$g" -type f | wc -l)" "$(du -sb "$g" | cut -f1)"
    done)
    echo "total: $(find "$SRC" -type f | wc -l) images, $(du -sb "$SRC" | cut -f1) bytes in $SRC (the carry's limit: 64 MiB in all)"
}

remote() {
    local build=${BUILD:-$ROOT/build} out=${OUT:-$ROOT/device-out} target=${TARGET:-72000}
    local work=${WORK:-${TMPDIR:-/tmp}/sqfd-real} jobs log n copies dev t0 rc=0
    jobs=$(nproc 2>/dev/null || echo 2)
    log=$out/bench_sqfd_real.log
    [ -d "$SRC" ] || { echo "no .carry/sqfd-real: run 'scripts/sqfd-real.sh prepare' here and carry it" >&2; exit 1; }
    for b in patina patina-variant bench/bench_sqfd; do
        [ -x "$build/$b" ] || { echo "no $build/$b" >&2; exit 1; }
    done
    mkdir -p "$out"
    rm -rf "$work"
    mkdir -p "$work/img"
    : > "$log"
    say() { echo "$*" | tee -a "$log"; }

    # originals, numbered in byte order of GROUP/NAME
    (cd "$SRC" && find . -type f -name '*.jpg' | sed 's|^\./||' | LC_ALL=C sort) > "$work/originals.txt"
    n=$(wc -l < "$work/originals.txt")
    [ "$n" -gt 0 ] || { echo "no images in $SRC" >&2; exit 1; }
    copies=$(( (target + n - 1) / n - 1 ))
    [ "$copies" -ge 0 ] || copies=0
    say "# sqfd-real: $n originals ($(du -sb "$SRC" | cut -f1) bytes) x (1 + $copies variants) = $((n * (copies + 1))) images (target $target); $jobs CPUs"
    (cd "$SRC" && cut -d/ -f1 "$work/originals.txt" | uniq -c | awk '{printf "#   %s %d\n", $2, $1}') | tee -a "$log"

    # the jobs: SRC DST CROP SCALE QUALITY, one line per variant
    awk -v src="$SRC" -v dst="$work/img" -v copies="$copies" '
        function next_r() { x = (x * 48271) % 2147483647; return x }
        { base = $0; sub(/\.jpg$/, "", base)
          for (j = 1; j <= copies; j++) {
              x = (NR * 1009 + j * 7919) % 2147483646 + 1
              next_r(); next_r()
              crop = next_r() % 16
              scale = 0.60 + (next_r() % 81) / 100
              q = 40 + next_r() % 56
              printf "%s/%s %s/%s~v%02d.jpg %d %.2f %d\n", src, $0, dst, base, j, crop, scale, q
          } }' "$work/originals.txt" > "$work/jobs.txt"
    cut -d/ -f1 "$work/originals.txt" | uniq | while read -r g; do mkdir -p "$work/img/$g"; done
    while read -r f; do cp "$SRC/$f" "$work/img/$f"; done < "$work/originals.txt"
    say "# variant parameters (crop % per side, scale, quality): $(awk '
        NR == 1 { c0 = c1 = $3; s0 = s1 = $4; q0 = q1 = $5 }
        { if ($3 < c0) c0 = $3; if ($3 > c1) c1 = $3; if ($4 < s0) s0 = $4; if ($4 > s1) s1 = $4
          if ($5 < q0) q0 = $5; if ($5 > q1) q1 = $5 }
        END { if (NR) printf "crop %d..%d, scale %.2f..%.2f, quality %d..%d", c0, c1, s0, s1, q0, q1; else printf "none" }' "$work/jobs.txt")"

    t0=$(now)
    echo "== variants: $(wc -l < "$work/jobs.txt") with $jobs processes"
    # shellcheck disable=SC2016
    # 50 jobs (250 words; names have no blanks) per shell, $jobs shells at once
    xargs -r -P "$jobs" -n 250 sh -c 'while [ $# -ge 5 ]; do "$0" "$1" "$2" --crop "$3" --scale "$4" --quality "$5" || exit 255; shift 5; done' \
        "$build/patina-variant" < "$work/jobs.txt" || { say "variant generation failed"; exit 1; }
    say "# variants: $(wc -l < "$work/jobs.txt") images in $(since "$t0") s ($jobs processes); images $(du -sm "$work/img" | cut -f1) MiB"

    dev=${INDEX_DEVICE:-}
    if [ -z "$dev" ]; then
        if nvidia-smi -L > /dev/null 2>&1; then dev=gpu; else dev=cpu; fi
    fi
    echo "== patina index -f $SPEC --device $dev --pivots 32"
    t0=$(now)
    "$build/patina" index "$work/c.patina" "$work/img" -f "$SPEC" --device "$dev" --pivots 32 \
        > "$work/index.log" 2>&1 || rc=$?
    tee -a "$log" < "$work/index.log" | tail -n 5
    if [ "$rc" -ne 0 ] && [ "$dev" = gpu ]; then # the table still comes, from the CPU's records (the same bytes)
        say "# index on the GPU failed (exit $rc, above): again with --device cpu"
        rc=0 dev=cpu
        rm -rf "$work/c.patina"
        t0=$(now)
        "$build/patina" index "$work/c.patina" "$work/img" -f "$SPEC" --device cpu --pivots 32 \
            > "$work/index.log" 2>&1 || rc=$?
        tee -a "$log" < "$work/index.log" | tail -n 5
    fi
    say "# index: $(find "$work/img" -type f | wc -l) images, --device $dev, exit $rc, $(since "$t0") s (extraction + the pivot table); collection $(du -sm "$work/c.patina" | cut -f1) MiB"
    [ "$rc" -eq 0 ] || { rm -rf "$work"; exit "$rc"; }

    echo "== bench_sqfd --collection (64 queries, scan on 8, 32 pivots)"
    t0=$(now)
    # shellcheck disable=SC2086
    "$build/bench/bench_sqfd" --collection "$work/c.patina" --spec "$SPEC" --queries 64 --scan-queries 8 \
        --pivots 32 --no-peers ${BENCH_ARGS:-} 2>&1 | tee -a "$log" || rc=$?
    say "# bench_sqfd: exit $rc, $(since "$t0") s"
    if [ "${KEEP:-0}" = 1 ]; then
        echo "kept $work"
    else
        rm -rf "$work"
    fi
    return "$rc"
}

case $MODE in
prepare) prepare ;;
remote) remote ;;
*) echo "usage: scripts/sqfd-real.sh prepare|remote" >&2; exit 2 ;;
esac
