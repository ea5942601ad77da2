#!/usr/bin/env python3
"""Markdown summary of scripts/bench_planner.sh's results directory (DIR/planner).

Per layout, collective and size: the median (over rounds, each itself a median of the tool's
interleaved repeats) out-of-place time of the planner's
default and of every forced algorithm, and default / fastest forced (1.00x = the default is
the fastest; the target is at most 1.10x). Then, per layout and collective, how many sizes
meet the target.
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
                    algo = row.get("algo", m.group(3) or "default").split(":")[-1]
                    times[(layout, tool, algo, row["size"])].append(row["time_us"])
    groups = defaultdict(lambda: defaultdict(dict))  # (layout, tool) -> size -> algo -> median
    for (layout, tool, algo, size), values in times.items():
        groups[(layout, tool)][size][algo] = statistics.median(values)
    print("# Planner default against every forced algorithm\n")
    print("Out-of-place time in us, medians over rounds; `default / best` is the default's time "
          "over the fastest forced algorithm's (target: at most 1.10x).\n")
    verdicts = []
    for (layout, tool) in sorted(groups):
        sizes = groups[(layout, tool)]
        algos = sorted({a for per in sizes.values() for a in per if a != "default"})
        print("## %s, %s\n" % (tool, LAYOUT_LABELS.get(layout, layout)))
        print("| size | default | " + " | ".join(algos) + " | fastest forced | default / best |")
        print("|---:|---:|" + "---:|" * len(algos) + "---|---:|")
        met = total = 0
        for size in sorted(sizes):
            per = sizes[size]
            forced = [per[a] for a in algos if a in per]
            if "default" not in per or not forced:
                continue
            ratio = per["default"] / min(forced)
            fastest = min((per[a], a) for a in algos if a in per)[1]
            total += 1
            met += ratio <= 1.10
            cells = ["%.1f" % per[a] if a in per else "-" for a in algos]
            print("| %s | %.1f | %s | %s | %.2fx%s |" % (human(size), per["default"], " | ".join(cells),
                                                       fastest, ratio, "" if ratio <= 1.10 else " (miss)"))
        print()
        verdicts.append("- %s, %s: %d of %d sizes within 10%%" % (tool, LAYOUT_LABELS.get(layout, layout), met, total))
    print("## Summary\n")
    print("\n".join(verdicts))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
