#!/usr/bin/env python3
"""Replays the planner's choices against measured tables, without running anything.

For each summary.md that scripts/bench_planner.sh wrote (planner_summary.py's tables: per
layout, collective and size the median time of every forced algorithm), asks trnccl-topo
--plan which algorithm the cost model picks for that layout (this machine's defaults, or
--tuning FILE) and counts the sizes where that algorithm's measured time is within 10% of the
fastest forced one. It judges the model's choices, not the default's own (noisy) timing, so a
change to the model or its numbers can be checked against every table measured so far.
usage: planner_replay.py [--topo PATH] [--tuning FILE | --own-tuning] [--verbose] [--cores N]
                         SUMMARY.md...
"""
import argparse
import os
import re
import subprocess
import sys

from planner_summary import LAYOUT_LABELS

COLLECTIVES = {"all_reduce": "AllReduce", "all_gather": "AllGather",
               "reduce_scatter": "ReduceScatter", "broadcast": "Broadcast"}
# trnccl-topo's arguments for each layout, keyed by the summary's section title, and how many
# nodes share the measuring machine's cores (emulated nodes split them).
LAYOUTS = {LAYOUT_LABELS["2"]: (["--ranks-per-node", "2"], 1),
           LAYOUT_LABELS["4"]: (["--ranks-per-node", "4"], 1),
           LAYOUT_LABELS["2x2"]: (["--nodes", "2", "--ranks-per-node", "2"], 2)}
LAYOUT_KEYS = {label: key for key, label in LAYOUT_LABELS.items()}
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def plan(topo, layout, tuning, cores):
    """{collective: [(upper bytes, algorithm)]} from trnccl-topo's TRNCCL_ALGO line. tuning: a
    file, or {layout key: file}."""
    args, sharing = LAYOUTS[layout]
    if isinstance(tuning, dict):
        tuning = tuning.get(LAYOUT_KEYS[layout])
    cmd = ([topo] + args + ["--cores", str(max(1, cores // sharing)), "--plan"] +
           (["--tuning", tuning] if tuning else []))
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    line = next(l for l in out.splitlines() if l.startswith("TRNCCL_ALGO:"))
    table = {}
    for item in line[len("TRNCCL_ALGO:"):].split(";")[0].split():
        collective, rules = item.split("=", 1)
        bands = []
        for rule in rules.split(","):
            algo, _, limit = rule.partition("<=")
            upper = float("inf")
            if limit:
                upper = int(limit[:-1]) * SUFFIX[limit[-1]] if limit[-1] in SUFFIX else int(limit)
            bands.append((upper, algo.split("(")[0]))
        table[collective] = bands
    return table


def replay(path, topo, tuning, verbose, cores):
    plans, met, total, section, columns = {}, 0, 0, None, None
    with open(path) as f:
        for line in f:
            m = re.match(r"^## (all_reduce|all_gather|reduce_scatter|broadcast), (.*)$", line.strip())
            if m:
                section, columns = (m.group(1), m.group(2)), None
                continue
            if section and line.startswith("| size"):
                columns = [c.strip() for c in line.strip().strip("|").split("|")]
                continue
            if not (section and columns and re.match(r"^\| \d", line)) or section[1] not in LAYOUTS:
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            number, unit = cells[0].split()
            size = int(number) * UNITS[unit]
            # Columns: size, default, [tuned,] the forced algorithms..., fastest forced,
            # default / best[, tuned / best].
            notForced = {"size", "default", "tuned", "fastest forced", "default / best",
                         "tuned / best"}
            forced = {columns[i]: float(cells[i]) for i in range(len(columns))
                      if columns[i] not in notForced and cells[i] != "-"}
            if section[1] not in plans:
                plans[section[1]] = plan(topo, section[1], tuning, cores)
            pick = next(a for upper, a in plans[section[1]][COLLECTIVES[section[0]]]
                        if size <= upper)
            if pick not in forced:
                continue
            best = min(forced, key=forced.get)
            ratio = forced[pick] / forced[best]
            total += 1
            met += ratio <= 1.10
            if verbose and ratio > 1.10:
                print("  %s, %s, %s: %s %.2fx (fastest %s)" % (section[0], section[1], cells[0],
                                                              pick, ratio, best))
    return met, total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topo", default="build/src/trnccl-topo")
    parser.add_argument("--tuning")
    parser.add_argument("--own-tuning", action="store_true",
                        help="plan each table with its own trnccl-tune files (NAME.tuning-LAYOUT "
                             "beside NAME.md, from bench_planner.sh --tune); tables without "
                             "them are skipped")
    parser.add_argument("--verbose", action="store_true", help="list the sizes that miss")
    parser.add_argument("--cores", type=int, default=2,
                        help="cores of the machine the tables were measured on (2: the VMs of "
                             "docs/planner/runs)")
    parser.add_argument("summaries", nargs="+")
    args = parser.parse_args()
    all_met = all_total = 0
    for path in args.summaries:
        tuning = args.tuning
        if args.own_tuning:
            stem = path[:-3] if path.endswith(".md") else path
            tuning = {key: "%s.tuning-%s" % (stem, key) for key in LAYOUT_LABELS
                      if os.path.exists("%s.tuning-%s" % (stem, key))}
            if not tuning:
                continue
        met, total = replay(path, args.topo, tuning, args.verbose, args.cores)
        print("%s: %d of %d sizes within 10%%" % (path, met, total))
        all_met, all_total = all_met + met, all_total + total
    print("all: %d of %d sizes within 10%%" % (all_met, all_total))
    return 0 if all_total else 1


if __name__ == "__main__":
    sys.exit(main())
