#!/usr/bin/env python3
"""Markdown summary of scripts/bench_topology.sh's results directory (DIR/topology).

Per size: the hierarchical and flat-ring all-reduce times (medians over every run), the ratio
ring / hierarchical of the runs made back to back (median and range), and Open MPI's time over
trnccl's hierarchical one from the same runs (-M 1), for Open MPI over shared memory (vader),
over TCP, and on 2 emulated hosts (vader inside, TCP between) when the script could run them.
Then the bytes each rank sent over efa per call, against the model.
usage: topology_summary.py DIR
"""
import glob
import json
import os
import re
import statistics
import sys
from collections import defaultdict


def load(directory):
    """{(algo, btl, round): {(impl, size): time_us}} for out-of-place rows."""
    runs = {}
    pattern = re.compile(r"all_reduce_(\w+?)_mpi_(\w+)_round(\d+)\.jsonl$")
    for path in glob.glob(os.path.join(directory, "all_reduce_*_mpi_*_round*.jsonl")):
        m = pattern.search(os.path.basename(path))
        if not m:
            continue
        rows = {}
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                if row.get("placement") == "out":
                    rows[(row["impl"], row["size"])] = row["time_us"]
        runs[(m.group(1), m.group(2), int(m.group(3)))] = rows
    return runs


def human(size):
    return "%d MiB" % (size >> 20) if size >= 1 << 20 else "%d KiB" % (size >> 10)


def span(values):
    if not values:
        return "-"
    return "%.2fx (%.2f-%.2f)" % (statistics.median(values), min(values), max(values))


def efa_bytes(traffic_dir):
    """Bytes each rank sent over efa, from the rank files TRNCCL_TRAFFIC_DIR holds."""
    per_rank = {}
    for path in glob.glob(os.path.join(traffic_dir, "traffic.*")):
        rank, sent = None, 0
        with open(path) as f:
            for line in f:
                words = line.split()
                if words and words[0] == "rank":
                    rank = int(words[1])
                elif words and words[0] == "peer" and words[3] == "efa":
                    sent += int(words[8])
        if rank is not None:
            per_rank[rank] = sent
    return per_rank


def main(directory):
    runs = load(directory)
    if not runs:
        print("no topology results in %s" % directory)
        return 1
    sizes = sorted({size for rows in runs.values() for (impl, size) in rows if impl == "trnccl"})
    rounds = sorted({r for (_, _, r) in runs})
    out = []
    out.append("4 ranks as 2 emulated nodes x 2 ranks (TRNCCL_HOSTID, or host names under Open "
               "MPI's emulated hosts), shm inside a node, efa (libfabric's net provider on "
               "loopback) between the nodes; all_reduce_perf float "
               "sum out of place, -c 0, %d round(s); in each round, for each Open MPI path, the "
               "hierarchical run and the flat-ring run go back to back. Times are medians over "
               "every run; ratios are per round (median and range over rounds)." % len(rounds))
    out.append("")
    paths = [p for p in ("hosts", "vader", "tcp") if any(b == p for (_, b, _) in runs)]
    titles = {"hosts": "Open MPI 2 x 2 hosts / hierarchical",
              "vader": "Open MPI vader / hierarchical", "tcp": "Open MPI tcp / hierarchical"}
    out.append("| size | hierarchical (us) | flat ring (us) | ring / hierarchical | %s |"
               % " | ".join(titles[p] for p in paths))
    out.append("|---|---|---|---|%s" % ("---|" * len(paths)))
    for size in sizes:
        hier, ring, speedup = [], [], []
        vs_mpi = defaultdict(list)
        for (algo, btl, r), rows in runs.items():
            t = rows.get(("trnccl", size))
            if t is None:
                continue
            (hier if algo == "hierarchical" else ring).append(t)
            if algo == "hierarchical":
                other = runs.get(("ring", btl, r), {}).get(("trnccl", size))
                if other:
                    speedup.append(other / t)
                mpi = rows.get(("mpi", size))
                if mpi:
                    vs_mpi[btl].append(mpi / t)
        out.append("| %s | %.0f | %.0f | %s | %s |" % (
            human(size), statistics.median(hier) if hier else 0,
            statistics.median(ring) if ring else 0, span(speedup),
            " | ".join(span(vs_mpi[p]) for p in paths)))
    out.append("")
    out.append("Bytes sent over efa per rank and call (16 MiB all-reduce, one call out of place and "
               "one in place; the harness's own synchronisation adds a few bytes):")
    out.append("")
    out.append("| schedule | rank 0 | rank 1 | rank 2 | rank 3 | model |")
    out.append("|---|---|---|---|---|---|")
    size = 16 << 20
    models = {"hierarchical": "B/2 = %d each: 2(N-1)/N of the node's share B/2 (N = 2 nodes)"
                              % (size // 2),
              "ring": "1.5B = %d for the 2 ranks whose ring successor is on the other node, "
                      "0 for the others" % (size * 3 // 2)}
    for algo in ("hierarchical", "ring"):
        per_rank = efa_bytes(os.path.join(directory, "traffic_" + algo))
        cells = ["%d" % (per_rank.get(r, 0) // 2) for r in range(4)]
        out.append("| %s | %s | %s |" % (algo, " | ".join(cells), models[algo]))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build/bench-results/topology"))
