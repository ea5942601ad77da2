#!/usr/bin/python3
"""Plots the JSON lines the *_perf tools write with -J: one PNG per (tool, rank count).

Each PNG shows bus bandwidth (GB/s) against message size (log2 axis) with one line per
implementation and buffer placement (trnccl out-of-place, trnccl in-place, Open MPI
out-of-place) and, when the file has Open MPI rows (-M 1), a second panel with the ratio
MPI time / trnccl out-of-place time (> 1 means trnccl is faster) and a line at 1.0.

Rows carrying "repeats" (-R N) are already medians of N timings; when the same point appears
more than once (several files or runs) the median of those rows is plotted.

report.py imports the loading and naming helpers from here.
"""

import argparse
import json
import math
import os
import statistics
import sys

IMPL_NAMES = {"trnccl": "trnccl", "mpi": "Open MPI"}
PLACEMENT_NAMES = {"out": "out-of-place", "in": "in-place"}
# Line order and style per (impl, placement); anything else gets the default cycle.
SERIES_STYLE = {
    ("trnccl", "out"): dict(color="tab:blue", marker="o"),
    ("trnccl", "in"): dict(color="tab:cyan", marker="s", linestyle="--"),
    ("mpi", "out"): dict(color="tab:red", marker="^"),
}
NUMERIC_FIELDS = ("time_us", "algbw", "busbw", "ratio", "wrong", "repeats", "count")


class InputError(Exception):
    """A problem with the input that ends the program with a clear message."""


def human_size(nbytes):
    """8 -> '8B', 1024 -> '1K', 3 << 20 -> '3M', 1536 -> '1.5K'."""
    nbytes = float(nbytes)
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale:
            value = nbytes / scale
            text = ("%d" % value) if value == int(value) else ("%.3g" % value)
            return text + unit
    return "%dB" % nbytes if nbytes == int(nbytes) else "%.3gB" % nbytes


def _number(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and math.isfinite(value):
        return value
    return None


def load_rows(paths, warn=None):
    """Reads JSON-lines files; returns the usable rows, each normalised.

    A usable row has a string "tool" and "impl", an integer "nranks" > 0 and "size" >= 0.
    Other fields are optional. Unreadable lines and rows without those fields are skipped with
    one warning per file (through warn). Raises InputError for a file that cannot be opened.
    """
    warn = warn or (lambda msg: print("plot: warning: " + msg, file=sys.stderr))
    rows = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
        except OSError as e:
            raise InputError("cannot read %s: %s" % (path, e.strerror or e))
        bad_json, incomplete = [], []
        for number, line in enumerate(lines, 1):
            line = line.strip()
            if not line:
                continue
            try:
                raw = json.loads(line)
            except ValueError:
                bad_json.append(number)
                continue
            row = normalise(raw)
            if row is None:
                incomplete.append(number)
                continue
            row["_source"] = "%s:%d" % (path, number)
            rows.append(row)
        if bad_json:
            warn("%s: skipped %d line(s) that are not JSON (first: line %d)"
                 % (path, len(bad_json), bad_json[0]))
        if incomplete:
            warn("%s: skipped %d row(s) without tool/impl/nranks/size (first: line %d)"
                 % (path, len(incomplete), incomplete[0]))
    return rows


def normalise(raw):
    if not isinstance(raw, dict):
        return None
    tool, impl = raw.get("tool"), raw.get("impl")
    nranks, size = _number(raw.get("nranks")), _number(raw.get("size"))
    if not isinstance(tool, str) or not tool or not isinstance(impl, str) or not impl:
        return None
    if nranks is None or size is None or nranks < 1 or size < 0:
        return None
    row = {
        "tool": tool,
        "impl": impl,
        "nranks": int(nranks),
        "size": int(size),
        "type": str(raw.get("type") or "?"),
        "redop": str(raw.get("redop") or "none"),
        "placement": str(raw.get("placement") or "out"),
    }
    for field in NUMERIC_FIELDS:
        row[field] = _number(raw.get(field))
    return row


def group_key(row):
    return (row["tool"], row["nranks"], row["type"], row["redop"])


def aggregate(rows):
    """Groups rows into {group_key: {(impl, placement): {size: point}}}.

    A point holds the median of each numeric field over the rows for that
    (group, impl, placement, size), plus "rows" (how many were combined). Where MPI rows lack
    "ratio" but both times are known, the ratio is computed from the times.
    """
    collect = {}
    for row in rows:
        series = collect.setdefault(group_key(row), {}).setdefault(
            (row["impl"], row["placement"]), {})
        series.setdefault(row["size"], []).append(row)
    groups = {}
    for key, by_series in collect.items():
        out = groups.setdefault(key, {})
        for series_key, by_size in by_series.items():
            points = out.setdefault(series_key, {})
            for size, same in by_size.items():
                point = {"size": size, "rows": len(same)}
                for field in NUMERIC_FIELDS:
                    values = [r[field] for r in same if r[field] is not None]
                    point[field] = statistics.median(values) if values else None
                points[size] = point
        base = out.get(("trnccl", "out"), {})
        for size, point in out.get(("mpi", "out"), {}).items():
            ref = base.get(size)
            if (point["ratio"] is None and ref and ref["time_us"] and point["time_us"]):
                point["ratio"] = point["time_us"] / ref["time_us"]
    return groups


def plot_name(key, keys_for_tool_ranks):
    """File name (no directory) for a group; adds type and op only when they are ambiguous."""
    tool, nranks, dtype, redop = key
    name = "%s_%dranks" % (tool, nranks)
    if keys_for_tool_ranks > 1:
        name += "_%s" % dtype + ("" if redop == "none" else "_%s" % redop)
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name) + ".png"


def plot_names(groups):
    """{group_key: file name} for every group, unique across the groups."""
    per_tool_ranks = {}
    for key in groups:
        per_tool_ranks[key[:2]] = per_tool_ranks.get(key[:2], 0) + 1
    return {key: plot_name(key, per_tool_ranks[key[:2]]) for key in groups}


def series_label(impl, placement):
    return "%s %s" % (IMPL_NAMES.get(impl, impl), PLACEMENT_NAMES.get(placement, placement))


def series_order(series_key):
    known = list(SERIES_STYLE)
    return (known.index(series_key) if series_key in known else len(known), series_key)


def repeats_note(series):
    values = sorted({int(p["repeats"]) for points in series.values() for p in points.values()
                     if p["repeats"]})
    if not values:
        return "one timing per size (no -R)"
    return "median of %s timings per size (-R)" % "/".join(str(v) for v in values)


def _size_axis(ax, sizes):
    import matplotlib.ticker as ticker
    ax.set_xscale("log", base=2)
    lo = int(math.floor(math.log2(max(min(sizes), 1))))
    hi = int(math.ceil(math.log2(max(max(sizes), 1))))
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    step = max(1, math.ceil((hi - lo + 1) / 14))  # at most ~14 labels
    ticks = [2 ** e for e in range(lo, hi + 1, step)]
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: human_size(v)))
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.set_xlim(2 ** lo / 1.2, 2 ** hi * 1.2)


def _ratio_axis_format(ax, ratios):
    import matplotlib.ticker as ticker
    lo, hi = min(ratios + [1.0]), max(ratios + [1.0])
    if hi / max(lo, 1e-9) > 8:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: "%gx" % v))
    else:
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: "%.2gx" % v))


def draw(key, series, path, linear=False):
    """Writes one PNG for one group; returns the number of lines drawn."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tool, nranks, dtype, redop = key
    lines = {k: v for k, v in series.items() if any(p["busbw"] is not None for p in v.values())}
    ratios = sorted((s, p["ratio"]) for s, p in series.get(("mpi", "out"), {}).items()
                    if p["ratio"] is not None and p["ratio"] > 0)
    if not lines and not ratios:
        return 0
    if ratios:
        fig, (ax, rax) = plt.subplots(2, 1, figsize=(9, 7.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    else:
        fig, ax = plt.subplots(figsize=(9, 5))
        rax = None
    what = "%s, %d ranks, %s" % (tool, nranks, dtype) + ("" if redop == "none" else " " + redop)
    fig.suptitle("%s: bus bandwidth vs message size" % what, fontsize=13)
    ax.set_title(repeats_note(series) + "; one run on one machine", fontsize=9, color="0.35")
    all_sizes = []
    for series_key in sorted(lines, key=series_order):
        pts = sorted((s, p["busbw"]) for s, p in lines[series_key].items()
                     if p["busbw"] is not None)
        sizes = [s for s, _ in pts]
        values = [b for _, b in pts]
        all_sizes += sizes
        ax.plot(sizes, values, label=series_label(*series_key), markersize=4,
                **SERIES_STYLE.get(series_key, {}))
    ax.set_ylabel("busbw (GB/s)")
    positive = [p["busbw"] for v in lines.values() for p in v.values()
                if p["busbw"] is not None and p["busbw"] > 0]
    if not linear and positive and max(positive) / min(positive) > 20:
        ax.set_yscale("log")
    ax.grid(True, which="major", alpha=0.3)
    if lines:
        ax.legend(loc="upper left", fontsize=9)
    if rax is not None:
        rs = [s for s, _ in ratios]
        rv = [r for _, r in ratios]
        all_sizes += rs
        rax.plot(rs, rv, color="tab:green", marker="o", markersize=4,
                 label="trnccl speedup over Open MPI (MPI time / trnccl out-of-place time)")
        rax.axhline(1.0, color="0.3", linestyle=":", linewidth=1.2, label="1.0 = same speed")
        _ratio_axis_format(rax, rv)
        rax.set_ylabel("speedup (x)")
        rax.grid(True, which="major", alpha=0.3)
        rax.legend(loc="best", fontsize=8)
        rax.set_xlabel("message size (bytes)")
    else:
        ax.set_xlabel("message size (bytes)")
    _size_axis(rax if rax is not None else ax, all_sizes)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return len(lines) + (1 if ratios else 0)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="plot.py",
        description="Plot busbw vs size from the JSON lines of the trnccl *_perf tools (-J FILE): "
                    "one PNG per (tool, rank count), with a trnccl/Open MPI speedup panel when "
                    "the rows include Open MPI (-M 1).")
    parser.add_argument("out_dir", help="directory for the PNGs (created if missing)")
    parser.add_argument("files", nargs="+", metavar="FILE.jsonl", help="JSON-lines input files")
    parser.add_argument("--linear", action="store_true", help="linear busbw axis (default: log "
                        "when the values span more than 20x)")
    args = parser.parse_args(argv)

    try:
        rows = load_rows(args.files)
    except InputError as e:
        print("plot: error: %s" % e, file=sys.stderr)
        return 2
    if not rows:
        print("plot: error: no usable rows in %s (expected JSON objects with tool, impl, "
              "nranks, size, busbw as written by *_perf -J)" % ", ".join(args.files),
              file=sys.stderr)
        return 1
    try:  # fail here, clearly, rather than in the first draw
        import matplotlib
        matplotlib.use("Agg")  # files only, never a display
        import matplotlib.pyplot  # noqa: F401
    except ImportError:
        print("plot: error: matplotlib is missing: apt-get install python3-matplotlib and run "
              "this with /usr/bin/python3", file=sys.stderr)
        return 2
    try:
        os.makedirs(args.out_dir, exist_ok=True)
    except OSError as e:
        print("plot: error: cannot create %s: %s" % (args.out_dir, e.strerror or e),
              file=sys.stderr)
        return 2

    groups = aggregate(rows)
    names = plot_names(groups)
    written = 0
    for key in sorted(groups):
        path = os.path.join(args.out_dir, names[key])
        if draw(key, groups[key], path, linear=args.linear):
            print("plot: wrote %s" % path)
            written += 1
        else:
            print("plot: warning: %s %d ranks: no busbw or ratio values, no plot"
                  % key[:2], file=sys.stderr)
    if not written:
        print("plot: error: no row had a busbw or ratio value to plot", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
