#!/usr/bin/env python3
"""Markdown summary of scripts/bench_planner.sh's results directory (DIR/planner).

Per layout, collective and size: the median (over rounds, each itself a median of the tool's
interleaved repeats) out-of-place time of the planner's
default and of every forced algorithm, and default / fastest forced (1.00x = the default is
the fastest; the target is at most 1.10x); with bench_planner.sh --tune also the planner's
choice with the trnccl-tune file measured on that layout ("tuned") and its ratio. Then, per
layout and collective, how many sizes meet the target.
usage: planner_summary.py DIR
"""
import glob
import json
import os
import re
import statistics
import sys
from collections import defaultdict


# bench_planner.sh's layouts as the section titles name them (planner_replay.py reads them back).
LAYOUT_LABELS = {"2": "2 ranks", "4": "4 ranks (2 cores)", "2x2": "2 emulated nodes x 2 ranks"}


def human(size):
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return "%d %s" % (size >> shift, unit)
    return "%d B" % size


def main(directory):
    # One file per layout, collective and round, its rows tagged with the perf tool's -X name
    # ("default" or "allreduce:ring"); files of older runs name one algorithm in the file name.
    pattern = re.compile(r"^(\w+?)_(all_reduce|all_gather|reduce_scatter|broadcast)(?:_(\w+))?_round(\d+)\.jsonl$")
    times = defaultdict(list)  # (layout, tool, algo, size) -> [time_us per round]
    for path in sorted(glob.glob(os.path.join(directory, "*.jsonl"))):
        m = pattern.match(os.path.basename(path))
        if not m:
            continue
        layout, tool = m.group(1), m.group(2)
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                if row.get("impl") == "trnccl" and row.get("placement") == "out":
                    algo = row.get("algo", m.group(3) or "default")
                    # "tuned=FILE": the planner's choice with bench_planner.sh --tune's file.
                    algo = "tuned" if algo.startswith("tuned=") else algo.split(":")[-1]
                    times[(layout, tool, algo, row["size"])].append(row["time_us"])
    groups = defaultdict(lambda: defaultdict(dict))  # (layout, tool) -> size -> algo -> median
    for (layout, tool, algo, size), values in times.items():
        groups[(layout, tool)][size][algo] = statistics.median(values)
    print("# Planner default against every forced algorithm\n")
    print("Out-of-place time in us, medians over rounds; `default / best` is the default's time "
          "over the fastest forced algorithm's (target: at most 1.10x).\n")
    verdicts = []
    planned = ("default", "tuned")  # the planner's choices; every other column is forced
    for (layout, tool) in sorted(groups):
        sizes = groups[(layout, tool)]
        algos = sorted({a for per in sizes.values() for a in per if a not in planned})
        tuned = any("tuned" in per for per in sizes.values())
        print("## %s, %s\n" % (tool, LAYOUT_LABELS.get(layout, layout)))
        print("| size | default | " + ("tuned | " if tuned else "") + " | ".join(algos) +
              " | fastest forced | default / best |" + (" tuned / best |" if tuned else ""))
        print("|---:|---:|" + ("---:|" if tuned else "") + "---:|" * len(algos) + "---|---:|" +
              ("---:|" if tuned else ""))
        met = {p: 0 for p in planned}
        total = {p: 0 for p in planned}
        for size in sorted(sizes):
            per = sizes[size]
            forced = [per[a] for a in algos if a in per]
            if "default" not in per or not forced:
                continue
            fastest = min((per[a], a) for a in algos if a in per)[1]
            ratios = {}
            for p in planned:
                if p in per:
                    ratios[p] = per[p] / min(forced)
                    total[p] += 1
                    met[p] += ratios[p] <= 1.10
            verdict = lambda p: "%.2fx%s" % (ratios[p], "" if ratios[p] <= 1.10 else " (miss)") \
                if p in ratios else "-"
            cells = ["%.1f" % per[a] if a in per else "-" for a in algos]
            if tuned:
                cells.insert(0, "%.1f" % per["tuned"] if "tuned" in per else "-")
            print("| %s | %.1f | %s | %s | %s |%s" % (
                human(size), per["default"], " | ".join(cells), fastest, verdict("default"),
                " %s |" % verdict("tuned") if tuned else ""))
        print()
        verdicts.append("- %s, %s: %d of %d sizes within 10%%" % (
            tool, LAYOUT_LABELS.get(layout, layout), met["default"], total["default"]) +
            ("; tuned: %d of %d" % (met["tuned"], total["tuned"]) if tuned else ""))
    print("## Summary\n")
    print("\n".join(verdicts))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
