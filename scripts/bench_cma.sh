#!/usr/bin/env bash
# Single copy beside the staging windows and Open MPI: all_gather, alltoall, broadcast,
# all_reduce and reduce_scatter _perf under mpirun (-M 1: Open MPI timed on the same buffers,
# interleaved) in three variants one after the other: buffers from trncclMemAlloc (-A 1: peers
# map them; the reductions read and reduce out of them), ordinary buffers with TRNCCL_CMA=1
# (process_vm_readv; the reductions have no CMA form and take the windows), and TRNCCL_CMA=0
# (the windows), for ROUNDS separate rounds. Prints per tool and size the median over rounds of
# each run's out-of-place time and Open MPI ratio, with the range, and writes the rows and
# summary.md to build/bench-results/cma/ (bench/plot/report.py includes the summary).
#   bash scripts/bench_cma.sh [--np N] [--rounds R] [--tools "all_reduce reduce_scatter"] [--quick]
set -uo pipefail
cd "$(dirname "$0")/.."
np=2
rounds=3
sizes=(-b 256K -e 64M -f 4)
iters=(-n 10 -w 3 -R 3)
tools=(all_gather alltoall broadcast all_reduce reduce_scatter)
while [ $# -gt 0 ]; do
  case "$1" in
    --np) np="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --tools) read -r -a tools <<<"$2"; shift 2 ;;
    --quick) sizes=(-b 1M -e 4M -f 4); iters=(-n 3 -w 1 -R 1); rounds=1; shift ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *) echo "bench_cma: unknown argument $1 (see --help)"; exit 2 ;;
  esac
done
BIN=build/bench
for t in "${tools[@]}"; do
  [ -x "$BIN/${t}_perf" ] || { echo "bench_cma: build first (bash scripts/build.sh build)"; exit 1; }
done
out=build/bench-results/cma
rm -rf "$out" && mkdir -p "$out" || exit 1
MPIRUN=(mpirun)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
extra=(-np "$np")
[ "$np" -gt "$(nproc)" ] && extra+=(--oversubscribe)
failures=0
for round in $(seq 1 "$rounds"); do
  for variant in memalloc cma windows; do
    cma=1
    alloc=0
    [ "$variant" = windows ] && cma=0
    [ "$variant" = memalloc ] && alloc=1
    for t in "${tools[@]}"; do
      echo "bench_cma: round $round, $variant, ${t}_perf" >&2
      cmd=("${MPIRUN[@]}" "${extra[@]}" -x TRNCCL_CMA="$cma"
           --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo
           "$BIN/${t}_perf" "${sizes[@]}" "${iters[@]}" -c 1 -M 1 -A "$alloc"
           -J "$out/${t}_${variant}_round${round}.jsonl")
      echo "+ ${cmd[*]}" >>"$out/commands.txt"
      timeout -k 10 900 "${cmd[@]}" >"$out/${t}_${variant}_round${round}.txt" 2>&1 ||
        { echo "bench_cma: ${t}_perf failed (see $out)"; failures=$((failures + 1)); }
    done
  done
done
python3 - "$out" "$np" "$rounds" "${sizes[*]} ${iters[*]}" >"$out/summary.md" <<'EOF'
import glob, json, os, re, statistics, sys
out, np, rounds, flags = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rows = {}  # (tool, size, cma) -> list of (trnccl us, mpi us) per round
for path in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
    cma = re.search(r"_(memalloc|cma|windows)_round", path).group(1)
    per = {}
    for line in open(path):
        r = json.loads(line)
        if r.get("placement") != "out":
            continue
        per.setdefault((r["tool"], r["size"]), {})[r["impl"]] = r["time_us"]
        if r.get("wrong", 0) not in (0, -1):
            print(f"WRONG results in {path}: {r}")
    for (tool, size), t in per.items():
        if "trnccl" in t and "mpi" in t:
            rows.setdefault((tool, size, cma), []).append((t["trnccl"], t["mpi"]))
def rng(v):
    v = sorted(v)
    return f"{statistics.median(v):.2f}x ({v[0]:.2f}-{v[-1]:.2f})"
import datetime
print(f"`bash scripts/bench_cma.sh --np {np}`: {rounds} round(s) on {datetime.date.today()}; each round runs "
      f"every tool under mpirun (`{flags} -c 1 -M 1`) with buffers from trncclMemAlloc (`-A 1`), "
      "then with ordinary buffers and TRNCCL_CMA=1 (process_vm_readv), then TRNCCL_CMA=0 (the "
      "staging windows). Out of place; us is the median over rounds of each run's median "
      "trnccl time; x MPI = Open MPI time / trnccl time in the same run, on the same buffers "
      "(Open MPI's vader also copies once with CMA here), median over rounds (range).")
print()
print("| collective | size | trncclMemAlloc us | x MPI | CMA us | x MPI | windows us | x MPI |")
print("|---|---|---|---|---|---|---|---|")
for tool, size in sorted({(k[0], k[1]) for k in rows}):
    cells = []
    for cma in ("memalloc", "cma", "windows"):
        v = rows.get((tool, size, cma), [])
        if not v:
            cells += ["-", "-"]
            continue
        cells += [f"{statistics.median(x for x, _ in v):.0f}", rng([m / x for x, m in v])]
    print(f"| {tool} | {size >> 10} KiB | " + " | ".join(cells) + " |")
EOF
cat "$out/summary.md"
[ "$failures" -eq 0 ]
