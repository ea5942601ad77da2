#!/usr/bin/python3
"""Writes docs/PERFORMANCE.md from one benchmark results directory (scripts/bench.sh's output).

RESULTS_DIR holds:
  *.jsonl          rows of the *_perf tools (-J), trnccl and Open MPI (-M 1)
  micro/*.json     Google Benchmark JSON (--benchmark_format=json), aggregates or plain runs
  commands.txt     the commands that produced them, one per line (optional)
  run-info.txt     key: value lines written at run time: started, finished, trnccl, ... (optional)

The report says what machine and versions the numbers come from, how they were produced, and
shows only what the directory holds: nothing is filled in for a tool, size or benchmark that
was not measured.
"""

import argparse
import datetime
import glob
import json
import os
import platform
import re
import statistics
import subprocess
import sys

sys.dont_write_bytecode = True  # keep bench/plot free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot  # noqa: E402  (same directory: loading, aggregation and PNG names)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KIB, MIB = 1 << 10, 1 << 20
TIME_UNITS_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
TOOL_ORDER = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall",
              "sendrecv"]


# ---------------------------------------------------------------------------------------------
# machine and versions


def run(cmd, cwd=None):
    """First line of a command's output, or None when it is missing or fails."""
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if p.returncode != 0:
        return None
    lines = [l.strip() for l in (p.stdout or p.stderr).splitlines() if l.strip()]
    return lines[0] if lines else None


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def machine_info():
    info = []
    cpuinfo = read("/proc/cpuinfo") or ""
    m = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    model = m.group(1).strip() if m else None
    lscpu = {}
    out = None
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        pass
    for line in (out or "").splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            lscpu[k.strip()] = v.strip()
    model = model or lscpu.get("Model name")
    info.append(("CPU", model or "unknown (no model name in /proc/cpuinfo or lscpu)"))
    cores = "%d logical CPUs" % (os.cpu_count() or 0)
    if lscpu.get("Socket(s)") and lscpu.get("Core(s) per socket"):
        cores += " (%s socket(s) x %s core(s) x %s thread(s))" % (
            lscpu["Socket(s)"], lscpu["Core(s) per socket"], lscpu.get("Thread(s) per core", "?"))
    info.append(("cores", cores))
    if lscpu.get("Hypervisor vendor"):
        info.append(("virtualisation", "guest of %s" % lscpu["Hypervisor vendor"]))
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", read("/proc/meminfo") or "", re.M)
    if m:
        info.append(("memory", "%.1f GiB" % (int(m.group(1)) / (1 << 20))))
    osrel = read("/etc/os-release") or ""
    m = re.search(r'^PRETTY_NAME="?([^"\n]+)"?', osrel, re.M)
    kernel = "Linux %s" % platform.release()
    info.append(("kernel", kernel + (" (%s)" % m.group(1) if m else "")))
    return info


def versions(run_info):
    v = []
    gxx = run(["g++", "--version"])
    v.append(("g++", gxx or "not found"))
    ompi = run(["ompi_info", "--version"]) or run(["mpirun", "--version"])
    v.append(("Open MPI", ompi or "not found"))
    fi = run(["fi_info", "--version"])
    if fi:
        v.append(("libfabric", fi))
    else:
        pc = run(["pkg-config", "--modversion", "libfabric"])
        v.append(("libfabric", (pc + " (pkg-config; fi_info not installed)") if pc
                  else "not found"))
    trnccl = run_info.get("trnccl")
    if not trnccl:
        head = run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO)
        if head:
            dirty = run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO)
            trnccl = head + (" (dirty: uncommitted changes)" if dirty else "")
    v.append(("trnccl", (trnccl or "unknown (no git)") +
              ("" if "trnccl" not in run_info else ", at run time")))
    if run_info.get("google-benchmark"):
        v.append(("Google Benchmark", run_info["google-benchmark"]))
    return v


def read_run_info(results):
    info = {}
    for line in (read(os.path.join(results, "run-info.txt")) or "").splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            info[k.strip()] = v.strip()
    return info


# ---------------------------------------------------------------------------------------------
# perf tool rows


def fmt(value):
    if value is None:
        return "–"
    a = abs(value)
    if a >= 1000:
        return "%.0f" % value
    if a >= 10:
        return "%.1f" % value
    if a >= 0.1 or a == 0:
        return "%.2f" % value
    return "%.2g" % value


def fmt_ratio(value):
    return "–" if value is None else "%.2fx" % value


def tool_key(key):
    tool, nranks, dtype, redop = key
    order = TOOL_ORDER.index(tool) if tool in TOOL_ORDER else len(TOOL_ORDER)
    return (nranks, order, tool, dtype, redop)


def describe(key):
    tool, nranks, dtype, redop = key
    return "%s, %d ranks, %s%s" % (tool, nranks, dtype, "" if redop == "none" else " " + redop)


def point(groups, key, impl, size):
    return groups.get(key, {}).get((impl, "out"), {}).get(size)


def highlights(groups):
    """Rows for the issue's targets that this run measured: (what, trnccl, mpi, ratio)."""
    out = []
    targets = [(("all_reduce", 2, "float", "sum"), 8, "latency"),
               (("all_reduce", 2, "float", "sum"), 2 * MIB, "busbw"),
               (("all_reduce", 2, "float", "sum"), 64 * MIB, "busbw"),
               (("all_gather", 2, "float", "none"), 64 * MIB, "busbw"),
               (("alltoall", 2, "float", "none"), 64 * MIB, "busbw")]
    for key, size, kind in targets:
        t, m = point(groups, key, "trnccl", size), point(groups, key, "mpi", size)
        if not t or not m or m["ratio"] is None:
            continue
        if kind == "latency":
            what = "%s at %s: time" % (describe(key), plot.human_size(size))
            out.append((what, "%s us" % fmt(t["time_us"]), "%s us" % fmt(m["time_us"]),
                        fmt_ratio(m["ratio"])))
        else:
            what = "%s at %s: busbw" % (describe(key), plot.human_size(size))
            out.append((what, "%s GB/s" % fmt(t["busbw"]), "%s GB/s" % fmt(m["busbw"]),
                        fmt_ratio(m["ratio"])))
    for key in sorted(groups, key=tool_key):
        if key[1] != 4:
            continue
        mpi = groups[key].get(("mpi", "out"), {})
        candidates = [(p["ratio"], s) for s, p in mpi.items()
                      if s >= KIB and p["ratio"] is not None]
        if not candidates:
            continue
        ratio, size = min(candidates)
        t = point(groups, key, "trnccl", size)
        out.append(("%s: lowest ratio over sizes >= 1K (%d sizes), at %s" %
                    (describe(key), len(candidates), plot.human_size(size)),
                    "%s GB/s" % fmt(t["busbw"] if t else None), "%s GB/s" % fmt(mpi[size]["busbw"]),
                    fmt_ratio(ratio)))
    return out


def tool_table(series):
    """Markdown table lines for one (tool, nranks, type, op) group."""
    t_out = series.get(("trnccl", "out"), {})
    t_in = series.get(("trnccl", "in"), {})
    mpi = series.get(("mpi", "out"), {})
    sizes = sorted(set(t_out) | set(t_in) | set(mpi))
    has_in, has_mpi = bool(t_in), bool(mpi)
    head = ["size", "trnccl out busbw (GB/s)"]
    if has_in:
        head.append("trnccl in-place busbw (GB/s)")
    head.append("trnccl out time (us)")
    if has_mpi:
        head += ["Open MPI busbw (GB/s)", "Open MPI time (us)", "ratio (MPI/trnccl time)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    wrong = []
    for s in sizes:
        o, i, m = t_out.get(s), t_in.get(s), mpi.get(s)
        cells = [plot.human_size(s), fmt(o and o["busbw"])]
        if has_in:
            cells.append(fmt(i and i["busbw"]))
        cells.append(fmt(o and o["time_us"]))
        if has_mpi:
            cells += [fmt(m and m["busbw"]), fmt(m and m["time_us"]), fmt_ratio(m and m["ratio"])]
        lines.append("| " + " | ".join(cells) + " |")
        for p in (o, i):
            if p and p["wrong"] is not None and p["wrong"] > 0 and plot.human_size(s) not in wrong:
                wrong.append(plot.human_size(s))
    return lines, wrong


# ---------------------------------------------------------------------------------------------
# Google Benchmark


def load_micro(results, warn):
    """{binary: [entry]} with one entry per benchmark (median aggregate, or the plain run)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(results, "micro", "*.json"))):
        name = os.path.splitext(os.path.basename(path))[0]
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            benches = doc.get("benchmarks", [])
            if not isinstance(benches, list):
                raise ValueError("no benchmarks list")
        except (OSError, ValueError, AttributeError) as e:
            warn("%s: not Google Benchmark JSON (%s), left out" % (path, e))
            continue
        medians = [b for b in benches if isinstance(b, dict) and b.get("aggregate_name") == "median"]
        plain = [b for b in benches if isinstance(b, dict) and b.get("run_type") != "aggregate"]
        entries = []
        if medians:
            chosen, kind = medians, "median"
        else:
            # Without aggregates: the median of the plain repetitions of each benchmark.
            by_name = {}
            for b in plain:
                by_name.setdefault(b.get("run_name") or b.get("name"), []).append(b)
            chosen, kind = [], "single"
            for run_name, reps in by_name.items():
                b = dict(reps[0])
                for field in ("real_time", "cpu_time", "bytes_per_second"):
                    vals = [r[field] for r in reps if isinstance(r.get(field), (int, float))]
                    if vals:
                        b[field] = statistics.median(vals)
                b["repetitions"] = len(reps)
                chosen.append(b)
                kind = "median" if len(reps) > 1 else kind
        for b in chosen:
            if b.get("error_occurred"):
                continue
            run_name = b.get("run_name") or re.sub(r"_median$", "", b.get("name", "?"))
            parts = run_name.split("/")
            arg = next((int(p) for p in parts[1:] if p.isdigit()), None)
            entries.append({
                "family": parts[0], "arg": arg, "run_name": run_name,
                "real_time": b.get("real_time"), "cpu_time": b.get("cpu_time"),
                "unit": b.get("time_unit", "ns"), "bps": b.get("bytes_per_second"),
                "reps": b.get("repetitions"), "kind": kind, "label": b.get("label"),
            })
        if entries:
            out[name] = entries
        else:
            warn("%s: no successful benchmark results, left out" % path)
    return out


def micro_table(entries):
    memcpy = {e["arg"]: e["bps"] for e in entries if e["family"] == "BM_Memcpy" and e["bps"]}
    with_ratio = bool(memcpy) and any(e["family"] != "BM_Memcpy" and e["arg"] in memcpy
                                      for e in entries)
    head = ["benchmark", "size / arg", "time (us)", "GB/s"]
    if with_ratio:
        head.append("vs memcpy (same size)")
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for e in entries:
        arg = "–" if e["arg"] is None else "%s (%d)" % (plot.human_size(e["arg"]), e["arg"])
        scale = TIME_UNITS_US.get(e["unit"])
        t = "–" if e["real_time"] is None or scale is None else fmt(e["real_time"] * scale)
        gbs = "–" if not e["bps"] else fmt(e["bps"] / 1e9)
        cells = [e["family"], arg, t, gbs]
        if with_ratio:
            ref = memcpy.get(e["arg"])
            cells.append("%.2fx" % (e["bps"] / ref) if ref and e["bps"] and
                         e["family"] != "BM_Memcpy" else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# efa transport (libfabric on loopback)


def load_pingpong(results):
    """{provider: (header comment lines, [row cells])} from efa/fabric_pingpong_*.txt."""
    out = {}
    for path in sorted(glob.glob(os.path.join(results, "efa", "fabric_pingpong_*.txt"))):
        text = read(path) or ""
        head = [l[1:].strip() for l in text.splitlines() if l.startswith("#")]
        rows = [l.split() for l in text.splitlines()
                if l.strip() and l.strip()[0].isdigit() and len(l.split()) == 10]
        if rows:
            name = os.path.basename(path)[len("fabric_pingpong_"):-len(".txt")]
            out[name] = (head, rows)
    return out


def pingpong_table(rows):
    lines = ["| size | raw libfabric latency (us) | trnccl transport latency (us) | ratio "
             "| raw exchange (us) | trnccl exchange (us) | ratio "
             "| raw stream GB/s | trnccl stream GB/s | ratio |", "|" + "---:|" * 10]
    for cells in rows:
        size = plot.human_size(int(cells[0]))
        lines.append("| " + " | ".join([size] + cells[1:]) + " |")
    return lines


def efa_section(results, warn):
    md = []
    pingpong = load_pingpong(results)
    files = sorted(glob.glob(os.path.join(results, "efa", "*.jsonl")))
    rows = plot.load_rows(files, warn=warn) if files else []
    if not pingpong and not rows:
        return md
    md += ["## efa transport (libfabric on loopback)", ""]
    md.append("No EFA device here: these run libfabric's net, tcp;ofi_rxm and shm providers on "
              "one machine, which is how the efa transport's overhead over the library it uses "
              "is measured. Over TCP trnccl picks net by default (the provider's own reliable "
              "datagrams); Open MPI's ofi MTL cannot open net here, so it runs tcp;ofi_rxm.")
    md.append("")
    for name, (head, table) in sorted(pingpong.items()):
        md += ["### Point to point, %s provider (bench/fabric_pingpong)" % name, ""]
        md.append("Two processes; raw libfabric and the trnccl transport alternate for each size "
                  "in the same run. Latency is half a ping-pong round trip; an exchange is both "
                  "sides sending and receiving at once (a sendrecv, or one ring step); bandwidth "
                  "streams 16 messages in flight one way. Medians; ratio = trnccl / raw (times: "
                  "lower is better; bandwidth: higher is better).")
        md.append("")
        md += ["`%s`" % h for h in head[:2]] + [""]
        md += pingpong_table(table) + [""]
    for path in files:
        file_rows = plot.load_rows([path], warn=warn)
        if not file_rows:
            continue
        # all_reduce_efa_<trnccl's provider>_vs_<Open MPI's path>.jsonl
        ours, _, against = os.path.basename(path)[len("all_reduce_efa_"):-len(".jsonl")].partition(
            "_vs_")
        provider = {"net": "net", "tcp": "tcp;ofi_rxm"}.get(ours, ours)
        label = {"mpi_tcp_btl": "Open MPI `--mca pml ob1 --mca btl tcp,self`",
                 "mpi_ofi_mtl": "Open MPI `--mca pml cm --mca mtl ofi` (tcp;ofi_rxm)"}.get(
                     against, against)
        groups = plot.aggregate(file_rows)
        for key in sorted(groups, key=tool_key):
            md += ["### %s over efa (%s) beside %s" % (describe(key), provider, label), ""]
            lines, wrong = tool_table(groups[key])
            md += lines + [""]
            if wrong:
                md += ["**Wrong results** were reported at: %s." % ", ".join(wrong), ""]
    return md


def build(results, out_path, plots_dir, warn):
    files = sorted(glob.glob(os.path.join(results, "*.jsonl")))
    rows = plot.load_rows(files, warn=warn) if files else []
    micro = load_micro(results, warn)
    if not rows and not micro:
        raise plot.InputError("%s has no *.jsonl rows and no micro/*.json results"
                              % results)
    run_info = read_run_info(results)
    groups = plot.aggregate(rows)
    names = plot.plot_names(groups)
    out_dir = os.path.dirname(os.path.abspath(out_path))
    repeats = sorted({int(r["repeats"]) for r in rows if r["repeats"]})
    no_repeats = sum(1 for r in rows if not r["repeats"])
    when = ("run started %s" % run_info["started"]) if run_info.get("started") else (
        "report written %s" % datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"))

    md = ["# trnccl performance", ""]
    md.append("Generated by `bench/plot/report.py` from `%s` (the output of `scripts/bench.sh`)."
              % os.path.relpath(os.path.abspath(results), REPO)
              if os.path.abspath(results).startswith(REPO + os.sep)
              else "Generated by `bench/plot/report.py` from the output of `scripts/bench.sh`.")
    md.append("")
    caveat = ["**Read this first.** Every number below comes from **one run on the machine "
              "described here** (%s): host memory, shared memory and libfabric on loopback "
              "(the efa transport's stand-in); none was measured on Trainium, EFA or "
              "NeuronLink. This machine is shared and noisy: where a range is given, it is the "
              "spread over rounds of one run, and a figure from another day's run may differ "
              "by tens of percent." % when]
    if rows:
        if repeats:
            caveat.append("Collective figures are **medians of %s interleaved timings** "
                          "(`-R %s`) of trnccl and Open MPI for each size%s." % (
                              "/".join(map(str, repeats)), "/".join(map(str, repeats)),
                              "" if not no_repeats else
                              "; %d row(s) without `repeats` are single timings" % no_repeats))
        else:
            caveat.append("Collective figures are **single timings** per size (the tools ran "
                          "without `-R`), each the mean over the timed iterations of the slowest "
                          "rank.")
        caveat.append("Open MPI ran the same call on the same buffers in the same process "
                      "(`-M 1`); ratio = Open MPI time / trnccl out-of-place time, so > 1 "
                      "means trnccl was faster.")
    if micro:
        caveat.append("Micro benchmark figures are Google Benchmark medians over repetitions.")
    caveat.append("This page lists only what that run measured; a tool, size or rank count "
                  "that is missing here was not measured.")
    md += [" ".join(caveat), ""]

    md += ["## Machine", ""]
    md += ["- %s: %s" % kv for kv in machine_info()]
    md += ["", "## Versions", ""]
    md += ["- %s: %s" % kv for kv in versions(run_info)]
    md += ["", "## How it was run", ""]
    keys = ("started", "finished", "mode", "cross-core copy (start)", "cross-core copy (end)")
    for k in keys:
        if run_info.get(k):
            md.append("- %s: %s" % (k, run_info[k]))
    if any(run_info.get(k) for k in keys):
        md.append("")
    commands = [l for l in (read(os.path.join(results, "commands.txt")) or "").splitlines()
                if l.strip()]
    if commands:
        md += ["The exact commands, in order:", "", "```sh"] + commands + ["```", ""]
    else:
        md += ["(no `commands.txt` in the results directory: commands unknown)", ""]

    if rows:
        hl = highlights(groups)
        md += ["## Highlights", ""]
        if hl:
            md += ["Targets from the benchmark issue that this run covered (ratio > 1: trnccl "
                   "faster):", "",
                   "| what | trnccl | Open MPI | ratio (MPI/trnccl time) |",
                   "|---|---:|---:|---:|"]
            md += ["| %s | %s | %s | %s |" % h for h in hl]
        else:
            md.append("This run measured none of the benchmark issue's target points with both "
                      "trnccl and Open MPI.")
        md.append("")

        md += ["## Collectives", ""]
        md.append("busbw follows nccl-tests (algbw x the collective's bus factor); time is per "
                  "call, of the slowest rank. `–`: no value in the run (sendrecv has no "
                  "in-place variant).")
        md.append("")
        for key in sorted(groups, key=tool_key):
            md += ["### %s" % describe(key), ""]
            png = os.path.join(plots_dir, names[key])
            if os.path.isfile(png):
                rel = os.path.relpath(os.path.abspath(png), out_dir).replace(os.sep, "/")
                md += ["![%s](%s)" % (describe(key), rel), ""]
            lines, wrong = tool_table(groups[key])
            md += lines + [""]
            if wrong:
                md += ["**Wrong results** were reported at: %s." % ", ".join(wrong), ""]

    md += efa_section(results, warn)

    # scripts/bench_topology.sh writes its own summary (bench/plot/topology_summary.py).
    topology = os.path.join(results, "topology", "summary.md")
    if os.path.isfile(topology):
        md += ["## Topology: hierarchical all-reduce on 2 emulated nodes x 2 ranks", ""]
        md += [read(topology).rstrip(), ""]

    # scripts/bench_moe.sh writes its own summary (bench/plot/moe_summary.py).
    moe = os.path.join(results, "moe", "summary.md")
    if os.path.isfile(moe):
        md += ["## MoE dispatch + combine (TokenSwitch engine, bench/moe/moe_dispatch_perf)", ""]
        md += [read(moe).rstrip(), ""]

    # scripts/bench_cma.sh, bench_wait.sh, bench_torch.sh and bench_flight.sh write their own
    # summaries.
    for sub, title in (("cma", "Single copy (CMA) beside the windows and Open MPI, 2 ranks"),
                       ("wait", "Waiting: a rank blocked on a late peer (bench/perf/wait_perf)"),
                       ("torch", "torch.distributed: the trnccl backend beside gloo, 2 ranks"),
                       ("flight", "The flight recorder's cost: all-reduce with it on and off")):
        summary = os.path.join(results, sub, "summary.md")
        if os.path.isfile(summary):
            md += ["## " + title, ""]
            md += [read(summary).rstrip(), ""]

    if micro:
        md += ["## Micro benchmarks", ""]
        md.append("Google Benchmark; time is the real (wall-clock) time per iteration, GB/s is "
                  "bytes per second as each benchmark counts its bytes.")
        if "kernels_bench" in micro:
            md.append("In `kernels_bench` a two-source reduction counts 2 reads + 1 write and "
                      "memcpy 1 read + 1 write, so a reduction running at memory speed shows "
                      "about 1.5x memcpy's figure. The InPlace rows reduce into their first "
                      "source (a = a + b): the same bytes, but no third buffer whose lines a "
                      "store must first read for ownership.")
        md.append("")
        for name in sorted(micro):
            entries = micro[name]
            reps = sorted({e["reps"] for e in entries if e["reps"]})
            kind = entries[0]["kind"]
            md += ["### %s" % name, "",
                   ("Medians of %s repetitions." % "/".join(map(str, reps))) if kind == "median"
                   else "Single runs (no repetitions).", ""]
            md += micro_table(entries) + [""]

    text = "\n".join(md).rstrip() + "\n"
    os.makedirs(out_dir, exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(text)
    return len(groups), len(micro)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="report.py",
        description="Write the performance report (markdown) from a scripts/bench.sh results "
                    "directory: machine, versions, commands, highlights, one table per tool and "
                    "rank count, micro benchmark medians, links to the plot.py PNGs.")
    parser.add_argument("results", metavar="RESULTS_DIR",
                        help="directory with *.jsonl, micro/*.json, commands.txt, run-info.txt")
    parser.add_argument("-o", "--out", default=os.path.join(REPO, "docs", "PERFORMANCE.md"),
                        help="markdown file to write (default: docs/PERFORMANCE.md)")
    parser.add_argument("--plots", default=None,
                        help="directory holding plot.py's PNGs, linked relative to the report "
                             "(default: perf/ beside the report)")
    args = parser.parse_args(argv)
    plots_dir = args.plots or os.path.join(os.path.dirname(os.path.abspath(args.out)), "perf")
    if not os.path.isdir(args.results):
        print("report: error: %s is not a directory" % args.results, file=sys.stderr)
        return 2
    warn = lambda msg: print("report: warning: " + msg, file=sys.stderr)  # noqa: E731
    try:
        tools, micros = build(args.results, args.out, plots_dir, warn)
    except plot.InputError as e:
        print("report: error: %s" % e, file=sys.stderr)
        return 1
    except OSError as e:
        print("report: error: cannot write %s: %s" % (args.out, e.strerror or e), file=sys.stderr)
        return 2
    print("report: wrote %s (%d tool tables, %d micro benchmark binaries)"
          % (args.out, tools, micros))
    return 0


if __name__ == "__main__":
    sys.exit(main())
