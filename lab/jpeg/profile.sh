#!/bin/sh
# Where the parallel Huffman decoder's device time goes (docs/lab/jpeg.md).
# ON THE GPU MACHINE, from the repo root of its copy, with the staged build
# (scripts/device.sh build; carry .carry and samples/mate):
#
#   sh lab/jpeg/profile.sh [quick]
#
# Writes JPEGs cut from samples/mate (OpenCV there: quality 90, 4:2:0, no
# restart markers) at 1024x1024 and 640x480, then for each set and for the
# photographs themselves: lab_jpeg_huff (kernels = reference = libjpeg, device
# time best of 5), the kernels one by one (Nsight Compute's duration of every
# launch of one decode), and Nsight Compute's detailed sections of the init
# and write kernels on the 1024x1024 set. Logs under $OUT (or ./device-out).
set -u
ROOT=$(pwd)
S=$ROOT/.carry/stage
OUT=${OUT:-$ROOT/device-out}
W=${TMPDIR:-/tmp}/jh-profile
NCU=/usr/local/cuda/bin/ncu
mkdir -p "$OUT" "$W"
(cd "$S" && ln -sf libpatina.so.0.1.0 libpatina.so.0)
export LD_LIBRARY_PATH="$S/lib:$S${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
LAB=$S/lab/jpeg/lab_jpeg_huff

python3 - "$ROOT/samples/mate" "$W" <<'EOF'
import os, sys, cv2
src, out = sys.argv[1], sys.argv[2]
ims = [cv2.imread(os.path.join(src, f)) for f in sorted(os.listdir(src)) if f.endswith('.jpg')]
ims = [m for m in ims if m is not None]
for name, (w, h), n in (('1024', (1024, 1024), 256), ('vga', (640, 480), 512)):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    for i in range(n):
        m = ims[i % len(ims)]
        if m.shape[0] < h or m.shape[1] < w:
            f = max(h / m.shape[0], w / m.shape[1])
            m = cv2.resize(m, None, fx=f, fy=f, interpolation=cv2.INTER_AREA if f < 1 else cv2.INTER_CUBIC)
        k = i // len(ims)
        y = (k * 97) % (m.shape[0] - h + 1)
        x = (k * 131) % (m.shape[1] - w + 1)
        cv2.imwrite(os.path.join(d, '%04d.jpg' % i), m[y:y + h, x:x + w],
                    [cv2.IMWRITE_JPEG_QUALITY, 90, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420])
    print(name, n, 'files', sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) // 1000, 'kB')
EOF

for set in "$ROOT/samples/mate" "$W/1024" "$W/vga"; do
    echo "== lab_jpeg_huff --validate $set"
    "$LAB" --validate --repeat 5 "$set" 2>&1 | grep -v '^C reference' | tail -5
done > "$OUT/lab.txt" 2>&1
cat "$OUT/lab.txt"
[ "${1:-}" = quick ] && exit 0

for set in "$ROOT/samples/mate" "$W/1024"; do
    echo "== ncu durations (us, the timed decode's launches in order): $set"
    "$NCU" --metrics gpu__time_duration.sum -k regex:jh_k_ --csv "$LAB" --repeat 1 "$set" 2>/dev/null |
        python3 -c '
import csv, sys
rows = [r for r in csv.reader(sys.stdin) if len(r) > 10]
h = rows[0]; rows = rows[1:]
ki, vi, ui = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1, "usecond": 1, "ms": 1e3, "msecond": 1e3}
out = []
for r in rows[len(rows) // 2:]:  # two decodes: the sizing run, the timed run
    out.append((r[ki].split("(")[0], float(r[vi].replace(",", "")) * scale.get(r[ui], 1)))
print(" ".join("%s %.1f" % (k[5:], v) for k, v in out))
print("total %.1f us" % sum(v for _, v in out))'
done > "$OUT/ncu-durations.txt" 2>&1
cat "$OUT/ncu-durations.txt"
[ "${1:-}" = durations ] && exit 0

"$NCU" --set detailed -k regex:'jh_k_(init|write)' -c 2 "$LAB" --repeat 1 "$W/1024" > "$OUT/ncu-detailed.txt" 2>&1
grep -E 'jh_k_|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Local Memory|Block Limit' "$OUT/ncu-detailed.txt" | head -80
