#!/bin/sh
# The cluster benchmark (issue 28, "Benchmarks"): one table, the paper's
# numbers beside (bench/cluster/table.py prints it).
#
#   bench/cluster/run.sh [BUILD_DIR]        (default build/, or $BUILD)
#
# Starts a JetStream server (NATS from .venv-nats/bin/nats-server, the PATH,
# or $NATS_SERVER) on a free loopback port, then measures with
# BUILD_DIR/bench/bench_cluster:
#   - the in-process engine on 1 GPU and on every GPU (--gpus all; on a
#     machine of one GPU "0,0", two slices sharing it, and the table says so),
#     and on 1 GPU with the rows in P/2 tables identified in one call (one
#     GPU pass over the tables' reference sets: the cost of many sets);
#   - the cluster path: NATS + one GPU shard per GPU (two shards sharing the
#     GPU on a machine of one) + the front end's code, copies 1 and 2;
#   - CPU shards S = 1, 2, 4 (the scaling shape, at a smaller N);
#   - time to recover full coverage after kill -9 of a shard (copies 2: the
#     other copy; copies 1: the survivors take its partitions over);
#   - write-to-visible latency (real buckets, 2 CPU shards, copies 2).
# The query path runs on synthetic references (`patina shard --synthetic
# N:SEED`, the same rows the in-process table gets): N rootsift references
# of m = 384 do not fit JetStream on the benchmark machine (about 50 KB
# each). Environment: REFS (GPU rows, default 2000000; lowered to what 60%
# of the host memory holds), CPU_REFS (default 2000), P (partitions, 64),
# REPS (20), WARMUP (untimed queries before each series, 5), BATCH (16), QUERY (a sample photograph), CPU_ONLY=1 (skip the
# GPU rows), COPIES (the GPU cluster rows' copies, default "1 2"; "1" holds
# each reference once in the shards, so 2 M of them fit a 256 GiB host; set
# and empty: no GPU cluster rows, e.g. for KNN_ROWS alone),
# CPU_ROWS=0 (skip the CPU shard and write rows), INPROC (the in-process GPU
# rows to run, default "1 all tables": a 2 M run fills each in about three
# minutes on the 2 x H200 host, so a run that has them already can leave them
# out), TABLES_REFS (the references of the "tables" row, default REFS),
# RECOVER=0 (no kill -9 of a GPU shard: with copies 1 the survivor loads the
# dead shard's references, about a minute at 2 M), SHARDS_GPU (the GPU shards'
# devices, default one per GPU, or "0 0" on a machine of one; "0" is a single
# shard holding every partition: against the "tables" row with TABLES=P, the
# fan-out's own cost on one GPU), TABLES (the "tables" row's tables, P/2).
# NATS3=1: three JetStream servers in one cluster (sync_interval always; the
# buckets R3) instead of one. JOIN=1: after each GPU cluster row, one shard
# leaves (SIGTERM: it hands its partitions over) and joins again while two front ends
# (`bench_cluster load`) query: seconds until the cluster settles each time,
# queries failed, partial or changed (issue 33's "adding a shard under load",
# on the shards a machine has). CPU_ROWS=write: only the write rows of the
# CPU section; they now also put rows while one of the two shards is killed
# (kill -9) and count afterwards the acknowledged rows found (none lost).
# KNN_ROWS=N (default 0: none): the global CEDD k-NN over N synthetic rows across the shards (one per
# GPU, or KNN_CPU_SHARDS CPU shards), one query and KNN_BATCH-query batches (bench_cluster knn), after
# the same rows in one process (KNN_INPROC, default "1 all shard": one GPU, every GPU, and one GPU
# shard's share of the rows in its partitions' tables searched in one call, as the shard does; empty:
# none). A run with KNN_ROWS and no identify rows (COPIES set and empty, CPU_ROWS=0) needs no QUERY.
# Logs and JSON lines go to $OUT (default ./bench-cluster-out); with a GPU also
# dmon.log (nvidia-smi dmon: clocks, power, load each second) and passes.log (when
# each series started and ended, with the shards' minor page faults then).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-${BUILD:-$ROOT/build}}
OUT=${OUT:-$ROOT/bench-cluster-out}
PATINA=$BUILD/patina
DRIVER=$BUILD/bench/bench_cluster
P=${P:-64}
REPS=${REPS:-20}
WARMUP=${WARMUP:-5}
BATCH=${BATCH:-16}
SEED=7
QUERY=${QUERY:-$(find "$ROOT/samples" -name '*.jpg' 2>/dev/null | sort | head -1)}
mkdir -p "$OUT"
RES=$OUT/results.jsonl
: > "$RES"
[ -x "$DRIVER" ] || { echo "run.sh: no $DRIVER (build the bench_cluster target; it needs libnats)" >&2; exit 1; }
if [ -z "$QUERY" ] && ! { [ "${KNN_ROWS:-0}" -gt 0 ] && [ -n "${COPIES+x}" ] && [ -z "${COPIES}" ] &&
    [ "${CPU_ROWS:-}" = 0 ] && [ -z "${INPROC-x}" ]; }; then
    echo "run.sh: no query photograph (scripts/fetch-samples.sh, or QUERY=)" >&2
    exit 1
fi
NATS=${NATS_SERVER:-}
[ -n "$NATS" ] || { [ -x "$ROOT/.venv-nats/bin/nats-server" ] && NATS=$ROOT/.venv-nats/bin/nats-server; } || true
[ -n "$NATS" ] || NATS=$(command -v nats-server || true)
[ -n "$NATS" ] || { echo "run.sh: no nats-server (.venv-nats/bin/nats-server, PATH or NATS_SERVER)" >&2; exit 1; }

NGPU=0
if [ "${CPU_ONLY:-0}" != 1 ] && command -v nvidia-smi >/dev/null 2>&1; then
    NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
fi
# 2 M references by default, fewer when the host cannot hold them (a record
# is about 55 KB in host memory; the in-process rows and the shards run one
# after the other, and the shards hold each reference once per copy)
COPIES=${COPIES-1 2}
CPU_ROWS=${CPU_ROWS:-1}
MAXC=1
for c in $COPIES; do [ "$c" -le "$MAXC" ] || MAXC=$c; done
MEM_KB=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
FIT=$((MEM_KB / 55 * 6 / 10 / MAXC))
REFS=${REFS:-2000000}
[ "$REFS" -le "$FIT" ] || REFS=$FIT
CPU_REFS=${CPU_REFS:-2000}

PIDS=""
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
JS=$(mktemp -d)
NATS_PIDS=""
cleanup() {
    for p in $PIDS; do kill -9 "$p" 2>/dev/null || true; done
    for p in $NATS_PIDS; do kill "$p" 2>/dev/null || true; done
    [ -n "${DMON_PID:-}" ] && kill "$DMON_PID" 2>/dev/null || true
    rm -rf "$JS"
}
trap cleanup EXIT INT TERM
if [ "${NATS3:-0}" = 1 ]; then
    # three servers of one JetStream cluster, as deploy/ runs them (sync_interval always)
    P1=$(freeport) P2=$(freeport) P3=$(freeport) C1=$(freeport) C2=$(freeport) C3=$(freeport)
    URL=nats://127.0.0.1:$P1,nats://127.0.0.1:$P2,nats://127.0.0.1:$P3
    for i in 1 2 3; do
        eval "port=\$P$i cport=\$C$i"
        routes=""
        for j in 1 2 3; do [ $j = $i ] || { eval "rp=\$C$j"; routes="$routes${routes:+, }nats-route://127.0.0.1:$rp"; }; done
        mkdir -p "$JS/n$i"
        printf '%s\n' "server_name: n$i" "listen: 127.0.0.1:$port" "jetstream {" "  store_dir: \"$JS/n$i\"" \
            "  sync_interval: always" "}" "cluster {" "  name: patina-bench" "  listen: 127.0.0.1:$cport" \
            "  routes: [$routes]" "}" > "$JS/n$i.conf"
        "$NATS" -c "$JS/n$i.conf" > "$OUT/nats-n$i.log" 2>&1 &
        NATS_PIDS="$NATS_PIDS $!"
    done
    sleep 3 # the meta leader is elected
else
    PORT=$(freeport)
    URL=nats://127.0.0.1:$PORT
    "$NATS" -js -sd "$JS" -a 127.0.0.1 -p "$PORT" > "$OUT/nats.log" 2>&1 &
    NATS_PIDS=$!
fi
# the GPUs' clocks, power and load once a second, with the time (the passes'
# times are in the log): the first single-query pass of the cluster rows was
# slower than the second, after the batches, for a reason not yet found
if [ "$NGPU" -gt 0 ]; then
    nvidia-smi dmon -s pcu -o T > "$OUT/dmon.log" 2>&1 &
    DMON_PID=$!
fi
# mark WHAT: the time, and each running shard's minor page faults so far
# (/proc/PID/stat field 10): a first pass that faults more than the second
# would point at memory returned to the system between calls
mark() {
    line="$(date +%H:%M:%S) $*"
    for p in $PIDS; do
        [ -r "/proc/$p/stat" ] && line="$line; pid $p minflt $(awk '{print $10}' "/proc/$p/stat")"
    done
    echo "$line" >> "$OUT/passes.log"
}
sleep 1

note() { echo "$*" >&2; }
record() { # record LABEL JSON-LINE...
    label=$1
    shift
    for j in "$@"; do [ -n "$j" ] && printf '{"label":"%s","data":%s}\n' "$label" "$j" >> "$RES"; done
}
# shard COLL NAME COPIES DEVICE [args...]: started in the background, with a hand-over of up to 120 s
# when it is stopped alone (the join step's SIGTERM); stop_all ends a row's shards with kill -9 (all at
# once: a hand-over would wait for nothing), and their entries expire
shard() {
    coll=$1 name=$2 copies=$3 dev=$4
    shift 4
    "$PATINA" shard "$coll" --cluster "$URL" --name "$name" --copies "$copies" --device "$dev" --drain-timeout 120 "$@" \
        >> "$OUT/shard-$coll-$name.log" 2>&1 &
    PIDS="$PIDS $!"
    eval "PID_$name=$!"
}
stop_all() {
    for p in $PIDS; do kill -9 "$p" 2>/dev/null || true; done
    for p in $PIDS; do wait "$p" 2>/dev/null || true; done
    PIDS=""
    sleep 6 # the members' entries expire (TTL 5 s)
}
# wait_cover COLL: until every partition has a ready copy
wait_cover() {
    i=0
    while [ $i -lt 3600 ]; do
        c=$("$PATINA" cluster status "$1" --cluster "$URL" --json 2>/dev/null |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["covered"])' 2>/dev/null || echo 0)
        [ "$c" = "$P" ] && return 0
        sleep 1
        i=$((i + 1))
    done
    note "run.sh: $1 not covered"
    return 1
}
front() {
    mark "front $1: start"
    "$DRIVER" front --cluster "$URL" --coll "$1" --refs "$REFS" --query "$QUERY" --reps "$REPS" --warmup "$WARMUP" --batch "$BATCH" --deadline "${2:-5000}"
    mark "front $1: end"
}
# settled COLL N COPIES: N members, none leaving, every partition on min(COPIES, N) copies, all ready,
# and the members' hosted partitions within one of each other
settled() {
    "$PATINA" cluster status "$1" --cluster "$URL" --json 2>/dev/null | python3 -c '
import json, sys
n, c = int(sys.argv[1]), int(sys.argv[2])
try:
    s = json.load(sys.stdin)
except ValueError:
    sys.exit(1)
m = s["members"]
if len(m) != n or any(x["leaving"] for x in m):
    sys.exit(1)
for p in s["partition_copies"]:
    if len(p["copies"]) != min(c, n) or not all(x["ready"] for x in p["copies"]):
        sys.exit(1)
h = [len(x["hosted"]) for x in m]
sys.exit(0 if max(h) - min(h) <= 1 else 1)' "$2" "$3"
}
# wait_settled COLL N COPIES: prints the seconds until settled (-1 after 600 s)
wait_settled() {
    t0=$(date +%s.%N)
    while ! settled "$1" "$2" "$3"; do
        if [ "$(python3 -c "import time,sys; print(int(time.time()-float(sys.argv[1]) > 600))" "$t0")" = 1 ]; then
            echo -1
            return
        fi
        sleep 0.2
    done
    python3 -c "import time,sys; print(f'{time.time()-float(sys.argv[1]):.2f}')" "$t0"
}
# join_under_load LABEL COLL NAME N COPIES DEVICE ARGS...: with two front ends querying, shard NAME (one
# of N) leaves (SIGTERM: it hands its partitions over) and, once the rest settled, starts again with
# ARGS; the seconds each change took to settle and the front ends' counts
join_under_load() {
    label=$1 coll=$2 jname=$3 nmem=$4 jcopies=$5 jdev=$6
    shift 6
    stop=$OUT/stop-$coll
    rm -f "$stop"
    for f in a b; do
        "$DRIVER" load --cluster "$URL" --coll "$coll" --query "$QUERY" --until "$stop" --deadline 5000 \
            > "$OUT/load-$coll-$f.json" 2> "$OUT/load-$coll-$f.log" &
        eval "LOAD_$f=$!"
    done
    sleep 5 # both front ends connected and querying
    mark "join $label: $jname leaves"
    eval "jpid=\$PID_$jname"
    kill "$jpid"
    leave_s=$(wait_settled "$coll" $((nmem - 1)) "$jcopies")
    wait "$jpid" 2>/dev/null || true
    sleep 3
    mark "join $label: $jname joins"
    shard "$coll" "$jname" "$jcopies" "$jdev" "$@"
    join_s=$(wait_settled "$coll" "$nmem" "$jcopies")
    mark "join $label: settled"
    sleep 3
    touch "$stop"
    wait "$LOAD_a" "$LOAD_b" 2>/dev/null || true
    record "$label" "{\"mode\":\"join\",\"shards\":$nmem,\"copies\":$jcopies,\"leave_s\":$leave_s,\"join_s\":$join_s,\"fronts\":[$(cat "$OUT/load-$coll-a.json"),$(cat "$OUT/load-$coll-b.json")]}"
}
# shard_seconds NAME...: each shard's request, queue and call seconds and identify requests (its metrics port), one line each
shard_seconds() {
    for n in "$@"; do
        eval "mp=\$MP_$n"
        python3 - "$n" "$mp" <<'PY'
import sys, urllib.request
name, port = sys.argv[1], sys.argv[2]
text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
v = {}
for line in text.splitlines():
    for m in ("request", "queue", "call"):
        if line.startswith(f"patina_shard_{m}_seconds_total{{"):
            v[m] = float(line.rsplit(" ", 1)[1])
    if line.startswith("patina_shard_requests_total{") and 'kind="identify"' in line:
        v["n"] = float(line.rsplit(" ", 1)[1])
print(name, v["n"], v["request"], v["queue"], v["call"])
PY
    done
}
# split_record LABEL BEFORE AFTER [PASS]: the per-request means of the single queries between two shard_seconds,
# with that pass's own p50 and in-shard median (PASS: the driver's JSON line)
split_record() {
    record "$1" "$(python3 - "$2" "$3" "${4:-}" <<'PY'
import json, sys
b = {l.split()[0]: [float(x) for x in l.split()[1:]] for l in sys.argv[1].splitlines() if l.strip()}
a = {l.split()[0]: [float(x) for x in l.split()[1:]] for l in sys.argv[2].splitlines() if l.strip()}
out = {}
for n in a:
    d = [x - y for x, y in zip(a[n], b[n])]
    if d[0] > 0:
        out[n] = {"requests": int(d[0]), "path_ms": 1e3 * d[1] / d[0], "queued_ms": 1e3 * d[2] / d[0],
                  "call_ms": 1e3 * d[3] / d[0]}
p = json.loads(sys.argv[3]) if sys.argv[3].strip() else {}
print(json.dumps({"mode": "split", "shards": out, "pass_p50_ms": p.get("p50_ms"), "pass_shard_ms": p.get("shard_ms")}))
PY
)"
}

if [ "$NGPU" -ge 1 ]; then
    if [ "$NGPU" -ge 2 ]; then ALL=all; DEF_SHARDS=$(seq 0 $((NGPU - 1)) | tr '\n' ' '); SHARING=0
    else ALL=0,0; DEF_SHARDS="0 0"; SHARING=1; fi
    SHARDS_GPU=${SHARDS_GPU:-$DEF_SHARDS}
    # one shard per device listed: sharing only when a device is listed twice
    [ "$(echo $SHARDS_GPU | tr ' ' '\n' | sort | uniq -d)" ] || SHARING=0
    # GPU memory budgets (GiB): 80% of a device for one process; shards sharing a GPU split it
    GIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{printf "%d", $1 * 0.8 / 1024}')
    SHARD_GIB=$GIB
    [ "$SHARING" = 0 ] || SHARD_GIB=$((GIB / 2))
    INPROC=${INPROC-1 all tables}
    TABLES_REFS=${TABLES_REFS:-$REFS}
    for row in $INPROC; do
        mark "inproc $row: start (the references are made first)"
        case $row in
        1)
            note "== in-process, $REFS references, 1 GPU"
            record "inproc 1 GPU" "$("$DRIVER" inproc --refs "$REFS" --partitions "$P" --seed "$SEED" --gpus 0 --budget "$GIB" --query "$QUERY" --reps "$REPS" --warmup "$WARMUP" --batch "$BATCH")" ;;
        all)
            note "== in-process, $REFS references, $ALL"
            record "inproc $ALL" "$("$DRIVER" inproc --refs "$REFS" --partitions "$P" --seed "$SEED" --gpus "$ALL" --budget "$SHARD_GIB" --query "$QUERY" --reps "$REPS" --warmup "$WARMUP" --batch "$BATCH")" ;;
        tables)
            # the rows on GPU 0 in P/2 tables (what a shard of a 2-GPU cluster holds) identified by one
            # patina_table_identify_many call: one GPU pass over their mirrors, against one table
            HALF=${TABLES:-$((P / 2 > 0 ? P / 2 : 1))}
            note "== in-process, $TABLES_REFS references in $HALF tables, 1 GPU"
            record "inproc 1 GPU tables=$HALF" "$("$DRIVER" inproc --refs "$TABLES_REFS" --partitions "$P" --seed "$SEED" --gpus 0 --budget "$GIB" --tables "$HALF" --query "$QUERY" --reps "$REPS" --warmup "$WARMUP" --batch "$BATCH")" ;;
        *) note "run.sh: INPROC row '$row' unknown (1, all, tables)"; exit 2 ;;
        esac
    done
    "$PATINA" cluster create gbench --cluster "$URL" --partitions "$P" -f rootsift > /dev/null
    for copies in $COPIES; do
        note "== cluster: GPU shards on devices $SHARDS_GPU, copies $copies"
        i=0
        NAMES=""
        for g in $SHARDS_GPU; do
            mp=$(freeport)
            eval "MP_g$i=$mp"
            NAMES="$NAMES g$i"
            shard gbench "g$i" "$copies" gpu --gpus "$g" --gpu-mem "${SHARD_GIB}G" --synthetic "$REFS:$SEED" --load-parallel 8 \
                --metrics-port "$mp"
            i=$((i + 1))
        done
        NSH=$i # (wait_cover reuses i)
        wait_cover gbench
        sleep 2
        record "cluster GPU copies $copies sharing=$SHARING shards=$(echo $SHARDS_GPU | wc -w)" "$(front gbench)"
        # where a single query's time in each shard goes (the shards' own counters around REPS more queries)
        s0=$(shard_seconds $NAMES)
        mark "second pass: start"
        pass=$("$DRIVER" front --cluster "$URL" --coll gbench --refs "$REFS" --query "$QUERY" --reps "$REPS" --warmup "$WARMUP" --batch 1)
        mark "second pass: end"
        split_record "split GPU copies $copies" "$s0" "$(shard_seconds $NAMES)" "$pass"
        # a shard leaves and joins again under two front ends' load
        if [ "${JOIN:-0}" = 1 ]; then
            jg=$(echo $SHARDS_GPU | awk '{print $NF}')
            join_under_load "join GPU copies $copies" gbench "g$((NSH - 1))" "$NSH" "$copies" gpu --gpus "$jg" \
                --gpu-mem "${SHARD_GIB}G" --synthetic "$REFS:$SEED" --load-parallel 8 --metrics-port "$(freeport)"
        fi
        # kill -9 of one shard: the seconds until an answer is whole again
        if [ "${RECOVER:-1}" != 0 ]; then
            kill -9 "$PID_g0"
            record "recover GPU copies $copies" "$("$DRIVER" cover --cluster "$URL" --coll gbench --query "$QUERY" --timeout 600 --deadline 2000)"
        fi
        stop_all
    done
fi

if [ "$CPU_ROWS" != 0 ] && [ "$CPU_ROWS" != write ]; then
    "$PATINA" cluster create cbench --cluster "$URL" --partitions "$P" -f rootsift > /dev/null
    note "== in-process CPU, $CPU_REFS references"
    # --device cpu: the CPU shards answer on the CPU (patina shard --device cpu), so does this row
    record "inproc CPU" "$("$DRIVER" inproc --refs "$CPU_REFS" --partitions "$P" --seed "$SEED" --gpus "" --device cpu --query "$QUERY" --reps 5 --batch 4)"
    record "inproc CPU tables" "$("$DRIVER" inproc --refs "$CPU_REFS" --partitions "$P" --seed "$SEED" --gpus "" --device cpu --tables "$P" --query "$QUERY" --reps 5 --batch 4)"
    for S in 1 2 4; do
        note "== cluster: $S CPU shards, copies 1, $CPU_REFS references"
        i=0
        NAMES=""
        while [ $i -lt "$S" ]; do
            mp=$(freeport)
            eval "MP_c$i=$mp"
            NAMES="$NAMES c$i"
            shard cbench "c$i" 1 cpu --synthetic "$CPU_REFS:$SEED" -j $(( $(nproc) / S > 0 ? $(nproc) / S : 1 )) \
                --metrics-port "$mp"
            i=$((i + 1))
        done
        wait_cover cbench
        sleep 2
        record "cluster CPU S=$S" "$("$DRIVER" front --cluster "$URL" --coll cbench --refs "$CPU_REFS" --query "$QUERY" --reps 5 --batch 4 --deadline 60000)"
        if [ "$S" = 1 ]; then
            s0=$(shard_seconds $NAMES)
            "$DRIVER" front --cluster "$URL" --coll cbench --refs "$CPU_REFS" --query "$QUERY" --reps 5 --batch 1 \
                --deadline 60000 > /dev/null
            split_record "split CPU S=1" "$s0" "$(shard_seconds $NAMES)"
        fi
        if [ "$S" = 2 ] && [ "${JOIN:-0}" = 1 ]; then
            join_under_load "join CPU copies 1" cbench c1 2 1 cpu --synthetic "$CPU_REFS:$SEED" \
                -j $(( $(nproc) / S > 0 ? $(nproc) / S : 1 )) --metrics-port "$(freeport)"
        fi
        if [ "$S" = 2 ]; then
            kill -9 "$PID_c0"
            record "recover CPU copies 1" "$("$DRIVER" cover --cluster "$URL" --coll cbench --query "$QUERY" --timeout 300 --deadline 60000)"
        fi
        stop_all
    done
fi

if [ "$CPU_ROWS" != 0 ]; then
    note "== write-to-visible: real buckets, 2 CPU shards, copies 2"
    "$PATINA" cluster create wbench --cluster "$URL" --partitions "$P" -f cedd > /dev/null
    shard wbench w0 2 cpu -j 1
    shard wbench w1 2 cpu -j 1
    wait_cover wbench
    sleep 3
    record "write" "$("$DRIVER" write --cluster "$URL" --coll wbench --reps "$REPS" --warmup "$WARMUP")"
    # rows put while one of the two copies' shards is killed (kill -9), then started again: every
    # acknowledged row must be found by its own descriptor, with one shard and after the rejoin
    note "== writes across kill -9 of a shard (copies 2)"
    keys=$OUT/wkeys.txt
    rm -f "$keys"
    "$DRIVER" write --cluster "$URL" --coll wbench --reps "${WRITES:-200}" --keys "$keys" > "$OUT/wkill.json" &
    wpid=$!
    sleep 1
    mark "writes: kill -9 of w0"
    kill -9 "$PID_w0"
    wait "$wpid" || true
    during=$("$DRIVER" check --cluster "$URL" --coll wbench --keys "$keys")
    shard wbench w0 2 cpu -j 1
    back=$(wait_settled wbench 2 2)
    after=$("$DRIVER" check --cluster "$URL" --coll wbench --keys "$keys")
    record "write kill" "{\"mode\":\"write_kill\",\"write\":$(cat "$OUT/wkill.json"),\"check_one_shard\":$during,\"rejoin_s\":$back,\"check_after_rejoin\":$after}"
    stop_all
fi

# KNN_ROWS=N: the global CEDD k-NN (issue 33) over N synthetic rows in P partitions, one shard per GPU
# (SHARDS_GPU; CPU shards, KNN_CPU_SHARDS of them, default 2, without a GPU or with CPU_ONLY=1), copies 1:
# one query and batches of KNN_BATCH (default 4096) through the front end's code, k = 10
if [ "${KNN_ROWS:-0}" -gt 0 ]; then
    # the same rows in one process first (KNN_INPROC: "1" one GPU, "all" every GPU, "shard" one GPU
    # shard's share of the rows, N / shards, in P / shards tables on GPU 0 searched in one call with
    # their keys, as a shard answers; default all three; without a GPU the CPU, unless KNN_INPROC is
    # set and empty), the comparison without the cluster
    if [ "$NGPU" -ge 1 ]; then rows=${KNN_INPROC-1 all shard}; else rows=${KNN_INPROC-cpu}; [ -z "$rows" ] || rows=cpu; fi
    nsh=$(echo $SHARDS_GPU | wc -w)
    for row in $rows; do
        n=$KNN_ROWS extra=
        case $row in
        1) g=0 ;; all) g=$ALL ;; cpu) g= ;;
        shard) g=0 n=$((KNN_ROWS / nsh)) extra="--tables $((P / nsh)) --keys" ;;
        *) note "run.sh: KNN_INPROC row '$row' unknown (1, all, shard)"; exit 2 ;;
        esac
        note "== k-NN in process: $n CEDD rows, GPUs '${g}' $extra"
        # shellcheck disable=SC2086
        record "knn inproc gpus=${g:-none}${extra:+ tables=$((P / nsh))}" "$("$DRIVER" knn --inproc --rows "$n" \
            --partitions "$P" --seed "$SEED" --gpus "$g" --budget "${GIB:-0}" --reps "$REPS" --warmup "$WARMUP" \
            --batch "${KNN_BATCH:-4096}" $extra)"
    done
    "$PATINA" cluster create kbench --cluster "$URL" --partitions "$P" -f cedd > /dev/null
    i=0
    if [ "$NGPU" -ge 1 ]; then
        note "== k-NN: $KNN_ROWS CEDD rows, GPU shards on devices $SHARDS_GPU"
        for g in $SHARDS_GPU; do
            mp=$(freeport)
            eval "MP_k$i=$mp"
            shard kbench "k$i" 1 gpu --gpus "$g" --gpu-mem "${SHARD_GIB}G" --synthetic "$KNN_ROWS:$SEED" --load-parallel 8 \
                --metrics-port "$mp"
            i=$((i + 1))
        done
        where=gpu
    else
        note "== k-NN: $KNN_ROWS CEDD rows, ${KNN_CPU_SHARDS:-2} CPU shards"
        while [ $i -lt "${KNN_CPU_SHARDS:-2}" ]; do
            mp=$(freeport)
            eval "MP_k$i=$mp"
            shard kbench "k$i" 1 cpu --synthetic "$KNN_ROWS:$SEED" -j 1 --metrics-port "$mp"
            i=$((i + 1))
        done
        where=cpu
    fi
    NK=$i # (wait_cover reuses i)
    mark "knn: shards started"
    wait_cover kbench
    mark "knn: covered"
    sleep 2
    record "cluster knn $where shards=$NK" "$("$DRIVER" knn --cluster "$URL" --coll kbench --rows "$KNN_ROWS" --partitions "$P" --seed "$SEED" \
        --reps "$REPS" --warmup "$WARMUP" --batch "${KNN_BATCH:-4096}" --deadline 60000)"
    # the shards' own account of the run's search requests (all of them: single queries and batches)
    i=0
    while [ $i -lt "$NK" ]; do
        eval "mp=\$MP_k$i"
        python3 - "k$i" "$mp" <<'PY' | tee -a "$OUT/knn-shards.log"
import sys, urllib.request
name, port = sys.argv[1], sys.argv[2]
text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
v, n = {}, 0.0
for line in text.splitlines():
    for m in ("request", "queue", "call"):
        if line.startswith(f"patina_shard_{m}_seconds_total{{"):
            v[m] = float(line.rsplit(" ", 1)[1])
    if line.startswith("patina_shard_requests_total{") and 'kind="search"' in line:
        n = float(line.rsplit(" ", 1)[1])
    if line.startswith("patina_shard_partitions_answered_total{"):
        v["parts"] = float(line.rsplit(" ", 1)[1])
print(f"shard {name}: {n:.0f} search requests, {v.get('parts', 0):.0f} partitions answered; seconds in requests "
      f"{v.get('request', 0):.3f}, queued {v.get('queue', 0):.3f}, in the library call {v.get('call', 0):.3f}")
PY
        i=$((i + 1))
    done
    stop_all
fi

python3 "$ROOT/bench/cluster/table.py" "$RES" "$NGPU" "$REFS" "$CPU_REFS" "$P" | tee "$OUT/table.md"
