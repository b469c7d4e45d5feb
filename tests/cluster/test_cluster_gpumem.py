#!/usr/bin/env python3
"""A GPU shard whose GPU memory cannot hold its partitions streams them from its host tier.

A shard's --gpu-mem is each device's budget; the library's table cache keeps what does not
fit in pinned host memory and streams it through the device under the compute. Here a
shard with a budget far below its partitions' bytes must answer exactly as a shard that
holds everything:

    k-NN      collection gmk (cedd, P = 4) of KNN_REFS synthetic references
              (--synthetic: the same rows for every shard given the same N:SEED):
              a CPU shard (the reference arithmetic), then a GPU shard with
              --gpu-mem KNN_MEM (the rows are ~7x that), the same queries, k = 10:
              keys and distances equal.
    identify  collection gmi (rootsift, P = 4) of IDF_REFS synthetic references:
              a GPU shard with the default budget (everything resident), then one
              with --gpu-mem IDF_MEM (the records are 2.5x that, the fp16 arena 5x; the budget
              leaves room for the streamed chunks' device buffers), the same sample
              photographs as queries: decisions, keys, scores, inliers and matches
              equal. (The CPU would take minutes on these references; the cluster
              suite compares GPU shards with the CPU: test_cluster_basic --device gpu.)

Each shard runs alone (copies 1); it prints what it compares, the budget and what the
shard reports (record bytes, device bytes held). GPU-labelled (CTest
test_cluster_gpumem_gpu); exit 77 without a GPU, a nats-server or samples/.
"""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cluster_basic as tb  # noqa: E402

P = 4
KNN_REFS, KNN_MEM = 2_000_000, "40M"   # cedd rows: 144 B each, 288 MB in all
IDF_REFS, IDF_MEM = 16_000, "300M"     # rootsift: 384 features x 128 B = 48 KB a reference (u8), twice as fp16
SEED = 7
MIB = 1 << 20


def member(c, coll, name):
    return {m["name"]: m for m in c.status(coll)["members"]}[name]


def answers(c, coll, argv):
    return tb.jsonl(tb.run(argv[0], coll, "--cluster", c.url, *argv[1:], "--format", "json",
                           "--deadline", "60000").stdout)


def phase(c, coll, name, device_args, argv, n):
    """Starts shard name alone on coll with n synthetic references, waits for it, answers argv,
    stops it (SIGTERM, --drain-timeout 0); returns (answers, its member entry)."""
    c.shard(coll, name, 1, ("--synthetic", f"{n}:{SEED}", "--drain-timeout", "0", "--no-work"), device_args)
    c.wait_ready(coll, [name], copies=1, timeout=600)
    got = answers(c, coll, argv)
    m = member(c, coll, name)
    assert all(a["partial"] is False and a["coverage"]["partitions"] == P for a in got), got
    c.kill(name, signal.SIGTERM)
    tb.say(f"  {name} ({' '.join(device_args)}): {m['bytes'] / MIB:.1f} MiB of records, "
           f"{m['gpu_mem'] / MIB:.1f} MiB device memory held")
    return got, m


def test_cluster_gpumem():
    samples = os.path.join(tb.SRC, "samples")
    if not os.path.isdir(samples):
        raise tb.Skip("no samples/ (scripts/fetch-samples.sh)")
    have = tb.gpu_count()
    if have < 1:
        raise tb.Skip(f"no GPU (`patina info` sees {have})")
    files = sorted(os.path.relpath(os.path.join(d, f), tb.SRC) for d, _, fs in os.walk(samples) for f in fs)
    queries = files[:4]
    c = tb.Cluster()
    try:
        # k-NN: CPU against a streaming GPU shard
        tb.run("cluster", "create", "gmk", "--cluster", c.url, "--partitions", str(P), "-f", "cedd")
        knn = ["search", "-f", "cedd", "-k", "10", *queries]
        tb.say(f"k-NN, {KNN_REFS} synthetic cedd references ({KNN_REFS * 144 / MIB:.0f} MiB), {len(queries)} queries:")
        ref, _ = phase(c, "gmk", "kcpu", ["--device", "cpu"], knn, KNN_REFS)
        got, m = phase(c, "gmk", "kgpu", ["--device", "gpu", "--gpu-mem", KNN_MEM], knn, KNN_REFS)
        assert m["bytes"] >= 4 * int(KNN_MEM[:-1]) * MIB, m
        assert tb.hits_of(got) == tb.hits_of(ref), (got, ref)
        tb.say(f"  equal: the GPU shard with --gpu-mem {KNN_MEM} == the CPU shard "
               f"({sum(len(a['hits']) for a in got)} hits: keys and distances)")

        # identify: resident against streamed
        tb.run("cluster", "create", "gmi", "--cluster", c.url, "--partitions", str(P), "-f", "rootsift")
        idf = ["identify", "-k", "5", *queries]
        tb.say(f"identify, {IDF_REFS} synthetic rootsift references, {len(queries)} sample photographs as queries:")
        ref, _ = phase(c, "gmi", "iall", ["--device", "gpu"], idf, IDF_REFS)
        got, m = phase(c, "gmi", "istream", ["--device", "gpu", "--gpu-mem", IDF_MEM], idf, IDF_REFS)
        assert m["bytes"] >= 2 * int(IDF_MEM[:-1]) * MIB, m
        assert tb.ident_of(got) == tb.ident_of(ref), (got, ref)
        tb.say(f"  equal: --gpu-mem {IDF_MEM} == the default budget (decisions {[a['decision'] for a in got]}; "
               "keys, scores, inliers, matches)")
    finally:
        c.close()


if __name__ == "__main__":
    try:
        test_cluster_gpumem()
    except tb.Skip as e:
        print(f"skipped: {e}")
        sys.exit(77)
    print("test_cluster_gpumem: OK")
