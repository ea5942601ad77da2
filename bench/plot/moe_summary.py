#!/usr/bin/env python3
"""Summarises scripts/bench_moe.sh's runs: per layout, routing skew and token count, the
engine's round trip and the two baselines' (median of each run's medians, and the range over
runs), and the ratios baseline / engine with their range over runs."""
import collections
import json
import pathlib
import re
import sys


def main(directory):
    rows = collections.defaultdict(list)
    failed = []
    for path in sorted(pathlib.Path(directory).glob("*.jsonl")):
        match = re.match(r"(.+)_z([0-9.]+)_round(\d+)\.jsonl", path.name)
        if not match:
            continue
        layout = match.group(1)
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            if row["wrong"] > 0:  # a run that failed (or checked wrong) is reported, not averaged
                failed.append("%s zipf %g tokens %d (%s): %d wrong elements or a failed call"
                              % (layout, row["zipf"], row["tokens"], path.name, row["wrong"]))
                continue
            rows[(layout, row["zipf"], row["tokens"])].append(row)
    if not rows:
        print("no results")
        return 1

    def span(values, fmt):
        values = sorted(values)
        mid = values[len(values) // 2]
        if len(values) == 1:
            return fmt % mid
        return (fmt + " (" + fmt + "-" + fmt + ")") % (mid, values[0], values[-1])

    print("| layout | zipf | tokens | engine trip us | route us | Open MPI baseline us |"
          " trncclAllToAllv baseline us | x Open MPI | x AllToAllv | payload MB engine/baseline | wrong |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (layout, zipf, tokens), runs in sorted(rows.items()):
        trip = [r["roundtrip_us"] for r in runs]
        mpi = [r["mpi_alltoallv_us"] for r in runs if r["mpi_alltoallv_us"] is not None]
        a2av = [r["trnccl_alltoallv_us"] for r in runs]
        x_mpi = [r["mpi_alltoallv_us"] / r["roundtrip_us"] for r in runs
                 if r["mpi_alltoallv_us"] is not None]
        x_a2av = [r["trnccl_alltoallv_us"] / r["roundtrip_us"] for r in runs]
        wrong = sum(r["wrong"] for r in runs)
        print("| %s | %g | %d | %s | %s | %s | %s | %s | %s | %.1f/%.1f | %d |" % (
            layout, zipf, tokens, span(trip, "%.0f"), span([r["route_us"] for r in runs], "%.0f"),
            span(mpi, "%.0f") if mpi else "n/a", span(a2av, "%.0f"),
            span(x_mpi, "%.2f") if x_mpi else "n/a", span(x_a2av, "%.2f"),
            runs[0]["sent_mb"], runs[0]["baseline_mb"], wrong))
    print()
    print("Each cell: median over runs (range over runs); every run's figure is itself a "
          "median over interleaved repeats. Ratios > 1: the engine is faster.")
    if failed:
        print()
        print("Runs left out because they failed (see log.txt):")
        for line in failed:
            print("- " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build/bench-results/moe"))
