#!/usr/bin/env bash
# Load test of `patina serve` (docs/serve.md, "Benchmark"): wrk on loopback
# against a 10k-image collection (CEDD of 32x32 noise images), searching by
# stored key and by descriptor (k = 10). Prints per scenario requests/s,
# p50/p99 latency, errors (non-2xx and socket errors) and the server's RSS
# sampled during the run (every 5 s, or every SECONDS/20 in longer runs).
#   bench/serve/run.sh [--gpu] [--tls] [BUILD_DIR] [SECONDS] [CONNECTIONS] [WRK_THREADS] [IMAGES]
# defaults: build 30 64 2 10000; SECONDS is per scenario. --gpu serves with
# --device gpu (searches batched on the GPU, 1000 us window) for a GPU build
# (scripts/device.sh build stages one). --tls serves HTTPS (a P-256
# certificate made here with openssl; wrk keeps its connections alive, so
# this measures the record layer, not handshakes). Needs wrk (Debian package `wrk`);
# WRK=path picks another, e.g. the copy scripts/stage-wrk.sh stages for the
# GPU machine (which has no wrk): WRK=.carry/wrk/wrk. SERVE_ARGS adds
# options to `patina serve`. SCENARIOS picks scenarios (default "key desc"),
# e.g. one per call where a machine limits a command's time.
set -euo pipefail
gpu=0; tls=0; pos=()
for a in "$@"; do case $a in --gpu) gpu=1 ;; --tls) tls=1 ;; *) pos+=("$a") ;; esac; done
set -- "${pos[@]+"${pos[@]}"}"
build=${1:-build}; dur=${2:-30}; conns=${3:-64}; wthreads=${4:-2}; nimg=${5:-10000}
patina=$(realpath "$build/patina")
WRK=${WRK:-wrk}
command -v "$WRK" >/dev/null || { echo "bench/serve: needs wrk (apt-get install wrk, or WRK=.carry/wrk/wrk from scripts/stage-wrk.sh)" >&2; exit 1; }
device=cpu; [ $gpu = 1 ] && device=gpu
every=$(( dur / 20 > 5 ? dur / 20 : 5 ))
work=$(mktemp -d); trap 'kill $srv 2>/dev/null || true; rm -rf "$work"' EXIT
python3 - "$work/imgs" "$nimg" <<'PY'
import os, random, sys
out, n = sys.argv[1], int(sys.argv[2])
rnd = random.Random(1)
for i in range(n):
    d = os.path.join(out, "%02d" % (i // 1000))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "%05d.ppm" % i), "wb") as f:
        f.write(b"P6\n32 32\n255\n" + rnd.randbytes(32 * 32 * 3))
PY
t0=$(date +%s.%N)
"$patina" index "$work/bench" "$work/imgs" -q
echo "indexed $nimg images in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s"
scheme=http; tlsargs=()
if [ $tls = 1 ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/key.pem" -out "$work/cert.pem" \
      -days 2 -subj /CN=localhost 2>/dev/null
  scheme=https; tlsargs=(--tls-cert "$work/cert.pem" --tls-key "$work/key.pem")
fi
"$patina" serve "$work/bench" --listen 127.0.0.1:0 "${tlsargs[@]+"${tlsargs[@]}"}" --device $device --max-per-ip $((conns + 16)) \
    --max-connections $((conns + 64)) -q ${SERVE_ARGS:-} 2>"$work/log" & srv=$!
for _ in $(seq 100); do grep -q "batching window" "$work/log" 2>/dev/null && break; sleep 0.1; done
port=$(grep -o 'listening on https*://127.0.0.1:[0-9]*' "$work/log" | sed 's/.*://')
grep "batching window" "$work/log"
cat >"$work/key.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  local i = math.random(0, $nimg - 1)
  return wrk.format(nil, nil, nil, string.format('{"key":"$work/imgs/%02d/%05d.ppm","k":10}', math.floor(i / 1000), i))
end
LUA
python3 - "$work/desc.lua" <<'PY'
import random, sys
rnd = random.Random(2)
bodies = ['{"descriptor":[%s],"k":10}' % ",".join(str(rnd.randrange(8)) for _ in range(144)) for _ in range(256)]
with open(sys.argv[1], "w") as f:
    f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nlocal b = {\n')
    f.write(",\n".join("'%s'" % b for b in bodies))
    f.write('}\nrequest = function() return wrk.format(nil, nil, nil, b[math.random(1, #b)]) end\n')
PY
rss() { awk '/VmRSS/ {printf "%d", $2 / 1024}' /proc/$srv/status; }
echo "$(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg); $dur s per scenario, $conns connections, $wthreads wrk threads, $scheme"
printf "\n%-12s %10s %10s %10s %8s  %s\n" scenario "req/s" "p50 ms" "p99 ms" errors "RSS MiB (every $every s)"
for sc in ${SCENARIOS:-key desc}; do
  samples="$(rss)"
  ( while sleep $every; do printf " %s" "$(rss)"; done ) >"$work/rss.$sc" & sampler=$!
  "$WRK" -t"$wthreads" -c"$conns" -d"${dur}s" --latency -s "$work/$sc.lua" "$scheme://127.0.0.1:$port/v1/collections/bench/search" >"$work/wrk.$sc"
  kill $sampler; wait $sampler 2>/dev/null || true
  rps=$(awk '/Requests\/sec/ {print $2}' "$work/wrk.$sc")
  p50=$(awk '$1 == "50%" {print $2}' "$work/wrk.$sc"); p99=$(awk '$1 == "99%" {print $2}' "$work/wrk.$sc")
  ms() { case $1 in *us) awk -v v="${1%us}" 'BEGIN {print v / 1000}';; *ms) echo "${1%ms}";; *s) awk -v v="${1%s}" 'BEGIN {print v * 1000}';; esac; }
  non2xx=$(awk '/Non-2xx/ {print $NF}' "$work/wrk.$sc"); sock=$(awk '/Socket errors/ {gsub(",", ""); print $4 + $6 + $8 + $10}' "$work/wrk.$sc")
  printf "%-12s %10s %10.2f %10.2f %8s  %s%s\n" "$sc" "$rps" "$(ms "$p50")" "$(ms "$p99")" "$(( ${non2xx:-0} + ${sock:-0} ))" "$samples" "$(cat "$work/rss.$sc")"
done
curl -sk "$scheme://127.0.0.1:$port/metrics" | grep -E '^patina_search_(batches|batched_queries)_total|^patina_gpu_memory' || true
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
kill -TERM $srv; wait $srv
