#!/usr/bin/env python3
"""Prints bench/cluster/run.sh's one table from its JSON lines, the paper's
numbers beside (Section 8 of texture-identification-distributed-gpus: 14
P100 containers, 10.8 M references, 872,984 reference images/s, 1.15 s per
million; one P100 at batch 1: 5,753 images/s resident).

    table.py RESULTS.jsonl NGPU REFS CPU_REFS P
"""
import json
import re
import sys

PAPER_CLUSTER = 872984  # reference images/s, 14 P100 (Section 8)
PAPER_ONE_GPU = 5753    # one P100, batch 1, references resident (Table 4)


def main():
    path, ngpu, refs, cpu_refs, parts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    rows = [json.loads(line) for line in open(path) if line.strip()]
    by = {r["label"]: r["data"] for r in rows}
    sharing = any("sharing=1" in r["label"] for r in rows)
    if any(r["label"].startswith("cluster GPU") and r["label"].endswith("shards=1") for r in rows):
        print("One GPU shard holding every partition: its overhead is against \"inproc 1 GPU tables\" when that "
              "row has the same references in P tables (TABLES=P): the fan-out's own cost, measurable on one GPU.\n")
    inproc_all = next((d for k, d in by.items() if k.startswith("inproc ") and k != "inproc 1 GPU"
                       and not k.startswith("inproc CPU") and "tables" not in k), None)
    # the "tables" row: the GPU rows on device 0 in T tables (label "inproc 1 GPU tables=T")
    tables_label = next((k for k in by if k.startswith("inproc 1 GPU tables")), None)
    ntables = int(tables_label.split("=")[1]) if tables_label and "=" in tables_label else max(parts // 2, 1)
    inproc_tables = by.get(tables_label) if tables_label else None
    # the CPU shards' overhead against the same rows in P tables (what a shard holds), else in one
    inproc_cpu = by.get("inproc CPU tables", by.get("inproc CPU"))
    print(f"Cluster benchmark: {ngpu} GPU(s){' (the GPU shards SHARE one GPU: two shards on device 0)' if sharing else ''}, "
          f"P = {parts} partitions, rootsift m = 384 references (synthetic: patina shard --synthetic), "
          f"one query photograph (n = 768)\n")
    print("| configuration | references | 1 query p50 / p99 (ms) | refs/s, 1 query | 1 query p50 after the batches (ms) "
          "| refs/s, batch | fan-out: all / slowest request / in its shard (ms) "
          "| overhead vs in-process (ms) | end to end, photograph (ms) | paper |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, d in by.items():
        if d.get("mode") not in ("inproc", "inproc_tables", "front"):
            continue
        over = ""
        if label.startswith("cluster GPU") and label.endswith("shards=1") and inproc_tables \
                and ntables == parts and inproc_tables["refs"] == d["refs"]:
            # one GPU shard holding every partition: against the same rows in P tables, one process
            over = f"{d['p50_ms'] - inproc_tables['p50_ms']:+.1f} (vs tables)"
        elif label.startswith("cluster GPU") and inproc_all and not label.endswith("shards=1"):
            over = f"{d['p50_ms'] - inproc_all['p50_ms']:+.1f}"
        elif label.startswith("cluster CPU") and inproc_cpu:
            over = f"{d['p50_ms'] - inproc_cpu['p50_ms']:+.1f}"
        paper = ""
        if label == "inproc 1 GPU":
            paper = f"{PAPER_ONE_GPU:,} (1 P100)"
        elif label.startswith("cluster GPU"):
            paper = f"{PAPER_CLUSTER:,} (14 P100)"
        name = label.replace(" sharing=1", " (shards sharing 1 GPU)").replace(" sharing=0", "")
        name = re.sub(r" shards=(\d+)$", lambda m: f", {m.group(1)} GPU shard{'' if m.group(1) == '1' else 's'}", name)
        name = name.replace("tables=", "tables, T = ")
        partial = " PARTIAL" if d.get("partial") else ""
        e2e = f"{d['extract_ms'] + d['p50_ms']:.1f}" if "extract_ms" in d else ""
        fan = f"{d['fanout_ms']:.1f}"
        if d.get("mode") == "front" and "wait_ms" in d:
            fan += f" / {d['wait_ms']:.1f} / {d['shard_ms']:.1f}"
        after = f"{d['after_batch_p50_ms']:.1f}" if d.get("after_batch_p50_ms") else ""
        print(f"| {name}{partial} | {d['refs']:,} | {d['p50_ms']:.1f} / {d['p99_ms']:.1f} | {d['refs_per_s']:,.0f} | "
              f"{after} | {d['batch_refs_per_s']:,.0f} (B={d['batch']}) | {fan} | {over} | {e2e} | {paper} |")
    print("\n| recovery after kill -9 of a shard | seconds to a whole answer | queries meanwhile (failed, partial) "
          "| slowest query (ms) |")
    print("|---|---|---|---|")
    for label, d in by.items():
        if d.get("mode") == "cover":
            print(f"| {label} | {d['seconds']:.2f}{'' if d['whole'] else ' (not whole at the limit)'} | "
                  f"{d['queries']} ({d['failed']}, {d['partial']}) | {d['worst_ms']:.1f} |")
    for label, d in by.items():
        if d.get("mode") == "split":
            for name, x in sorted(d["shards"].items()):
                print(f"\n{label}, shard {name} ({x['requests']} single queries, means from the shard's metrics): "
                      f"queued {x['queued_ms']:.2f} ms, then {x['path_ms']:.2f} ms answering = the library call "
                      f"{x['call_ms']:.2f} + decoding, locking and the reply {x['path_ms'] - x['call_ms']:.2f}"
                      + (f"; that pass at the front end: p50 {d['pass_p50_ms']:.1f} ms, median in the shard "
                         f"{d['pass_shard_ms']:.1f} ms" if d.get("pass_p50_ms") is not None else ""))
    if "write" in by:
        w = by["write"]
        print(f"\nwrite-to-visible (real buckets, 2 CPU shards, copies 2, {w['reps']} writes): acknowledged "
              f"p50 {w['ack_p50_ms']:.1f} ms, p99 {w['ack_p99_ms']:.1f} ms; found by a search p50 "
              f"{w['visible_p50_ms']:.1f} ms, p99 {w['visible_p99_ms']:.1f} ms"
              f"{'' if w['all_visible'] else ' (some never found in 30 s)'}")
    joins = [(label, d) for label, d in by.items() if d.get("mode") == "join"]
    if joins:
        print("\n| a shard leaves and joins again under load (two front ends) | shards, copies | seconds to settle: "
              "leave / join | queries (failed, partial, changed) | p50 / p99 / slowest (ms) |")
        print("|---|---|---|---|---|")
        for label, d in joins:
            for i, f in enumerate(d["fronts"]):
                print(f"| {label}, front end {i + 1} | {d['shards']}, {d['copies']} | "
                      f"{d['leave_s']:.2f} / {d['join_s']:.2f} | {f['queries']} ({f['failed']}, {f['partial']}, "
                      f"{f['changed']}) | {f['p50_ms']:.1f} / {f['p99_ms']:.1f} / {f['worst_ms']:.1f} |")
    if "write kill" in by:
        k = by["write kill"]
        w, c1, c2 = k["write"], k["check_one_shard"], k["check_after_rejoin"]
        print(f"\nwrites across kill -9 of one of two shards (copies 2): {w['reps']} puts, {w['acknowledged']} "
              f"acknowledged, {w['refused']} refused; acknowledged rows found by their own descriptor: "
              f"{c1['found']} of {c1['rows']} with one shard, {c2['found']} of {c2['rows']} after the shard "
              f"rejoined ({k['rejoin_s']:.2f} s to settle)")
    knns = [(label, d) for label, d in by.items() if d.get("mode") in ("knn", "knn_inproc")]
    if knns:
        print("\n| global k-NN across the shards (front end's code) | rows | k | 1 query p50 / p99 (ms) "
              "| 1 query p50 after the batches (ms) | batch | batch ms | queries/s |")
        print("|---|---|---|---|---|---|---|---|")
        for label, d in knns:
            after = f"{d['p50_after_ms']:.2f}" if d.get("p50_after_ms") is not None else ""
            print(f"| {label} ({d['spec']}) | {d['rows']:,} | {d['k']} | {d['p50_ms']:.2f} / {d['p99_ms']:.2f} | "
                  f"{after} | {d['batch']} | {d['batch_ms']:.1f} | {d['batch_queries_per_s']:,.0f} |")
    print(f"\npaper (Section 8): 14 P100 GPUs, 10.8 M references, {PAPER_CLUSTER:,} reference images/s, 1.15 s "
          "per million. Targets on 2 H200: cluster path >= 0.9 x 2 x the one-GPU rate for one query (>= 9.5 M "
          "refs/s), fan-out overhead <= 5 ms, 2 M references in <= 0.25 s, kill -9 with copies 2 costs no "
          "query more than one deadline.")
    print(f"CPU rows: {cpu_refs:,} references (the scaling shape, not a rate to compare), all on the CPU; "
          f"\"inproc CPU tables\": the same rows in {parts} tables identified together, as the shards hold them "
          "(the CPU shards' overhead is against it).")
    print("fan-out: the front end's scatter/gather (all), the round trip of its slowest shard request and that "
          "request's time inside the shard (arrival to reply, queue wait included); medians of the 1-query reps.")
    print("\"end to end, photograph\": the query photograph's decoding and RootSIFT extraction in the front end's "
          "process (median of 5) plus the 1-query p50: the answer to a photograph.")
    if inproc_tables:
        print(f"\"inproc 1 GPU tables\": the GPU rows on device 0 in {ntables} tables (P/2: a shard's partitions on 2 GPUs; "
              "P: a single shard's) identified by one patina_table_identify_many call, one GPU pass over their reference sets; "
              "the difference with \"inproc 1 GPU\" is the cost of many sets in one call.")


main()
