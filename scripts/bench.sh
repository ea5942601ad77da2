#!/usr/bin/env bash
# The benchmark command: install, build, then the standard sweep -- the seven nccl-tests style
# tools beside Open MPI (-M 1) on 2 ranks and on 4 oversubscribed ranks, then the Google
# Benchmark micro benchmarks -- into a fresh results directory, and from it the plots
# (bench/plot/plot.py) and the report (bench/plot/report.py). See --help.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

usage() {
  cat <<'EOF'
usage: bash scripts/bench.sh [--quick] [--out DIR] [--docs DIR] [--no-build] [--help]

Installs the Debian packages (scripts/install-deps.sh), builds (scripts/build.sh build), then:
  1. all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv _perf under mpirun
     on 2 ranks, sizes 8 B..64 MiB (x2), and on 4 ranks (--oversubscribe), 1 KiB..16 MiB (x4),
     each with -c 0 -M 1 -R 5 -J (trnccl and Open MPI interleaved, medians of 5 timings).
     Sizes up to 1 MiB use -n 20 -w 5; larger sizes -n 10 -w 2 to keep the sweep short.
  2. the efa transport on loopback: fabric_pingpong (raw libfabric beside the transport,
     net, tcp;ofi_rxm and shm providers, medians of 5) and all_reduce_perf over
     TRNCCL_TRANSPORT=efa beside Open MPI's tcp BTL and its ofi MTL, 256 KiB-64 MiB (trnccl over
     net against both, and over tcp;ofi_rxm against the MTL on tcp;ofi_rxm).
  3. the topology benchmark (scripts/bench_topology.sh): hierarchical all-reduce beside the
     flat ring and Open MPI on 2 emulated nodes x 2 ranks (as root also on 2 emulated hosts,
     scripts/emulated_node_ssh.sh), 1-64 MiB, 5 alternating rounds, and
     the bytes each rank sends over efa against the model.
  4. the micro benchmarks (kernels_bench, shm_ring_bench, and any of fabric_bench,
     planner_bench that are built) with 5 repetitions, median/mean/stddev aggregates.
  5. plot.py -> docs/perf/*.png and report.py -> docs/PERFORMANCE.md.
Takes about 10 minutes on a 2-core machine (--quick: about 45 s).

  --quick       smoke test in under a minute: tiny sizes, -n 5 -w 1 -R 2, 2 micro
                repetitions; plots and report go into the results directory, never docs/
  --out DIR     results directory (default build/bench-results); it is emptied first when it
                holds an earlier run of this script, refused when it holds anything else
  --docs DIR    where the report (DIR/PERFORMANCE.md) and plots (DIR/perf/) go
                (default docs, or the results directory with --quick)
  --no-build    skip install-deps and the build; use the binaries already in build/
  -h, --help    this text

Results: DIR/<tool>_<N>ranks.jsonl, DIR/efa/ (fabric_pingpong_*.txt, all_reduce_efa_*.jsonl),
DIR/micro/<bench>.json, DIR/logs/*.txt (console output),
DIR/commands.txt (every command, as run), DIR/run-info.txt. Exits non-zero when a run failed
(the report still shows what was measured).
EOF
}

quick=0
out=build/bench-results
docs=""
do_build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --out)
      [ $# -ge 2 ] || { echo "bench: --out needs a directory" >&2; exit 2; }
      out="$2"; shift ;;
    --out=*) out="${1#--out=}" ;;
    --docs)
      [ $# -ge 2 ] || { echo "bench: --docs needs a directory" >&2; exit 2; }
      docs="$2"; shift ;;
    --docs=*) docs="${1#--docs=}" ;;
    --no-build) do_build=0 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$out" ] || { echo "bench: --out needs a directory" >&2; exit 2; }
if [ -z "$docs" ]; then
  if [ "$quick" -eq 1 ]; then docs="$out"; else docs=docs; fi
fi

PY=/usr/bin/python3  # Debian's python (python3-matplotlib); not a pyenv one first on PATH
BIN=build/bench
TOOLS=(all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv)
# Google Benchmark binaries in $BIN; one that is not built is skipped with a note.
MICRO_BENCHES=(kernels_bench shm_ring_bench fabric_bench planner_bench)

if [ "$quick" -eq 1 ]; then
  repeats=2
  # "ranks | sizes | iterations", one line per mpirun of each tool
  SWEEP=(
    "2 | -b 8 -e 32K -f 8 | -n 5 -w 1"
    "4 | -b 1K -e 16K -f 4 | -n 5 -w 1"
  )
  MICRO_FLAGS=(--benchmark_repetitions=2 --benchmark_report_aggregates_only=true
               --benchmark_min_time=0.01)
  run_timeout=120
else
  repeats=5
  SWEEP=(
    "2 | -b 8 -e 1M -f 2 | -n 20 -w 5"
    "2 | -b 2M -e 64M -f 2 | -n 10 -w 2"
    "4 | -b 1K -e 1M -f 4 | -n 20 -w 5"
    "4 | -b 4M -e 16M -f 4 | -n 10 -w 2"
  )
  MICRO_FLAGS=(--benchmark_repetitions=5 --benchmark_report_aggregates_only=true)
  run_timeout=900
fi

MPIRUN=(mpirun)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)

say() { echo "bench: $*"; }

if [ "$do_build" -eq 1 ]; then
  say "installing packages and building"
  bash scripts/install-deps.sh || { say "install-deps failed"; exit 1; }
  bash scripts/build.sh build || { say "build failed"; exit 1; }
fi
[ -x "$PY" ] || { say "$PY not found (apt-get install python3)"; exit 1; }
"$PY" -c 'import matplotlib' 2>/dev/null ||
  { say "python3-matplotlib missing: run scripts/install-deps.sh"; exit 1; }
command -v mpirun >/dev/null || { say "mpirun not found (openmpi-bin)"; exit 1; }
for t in "${TOOLS[@]}"; do
  [ -x "$BIN/${t}_perf" ] || { say "$BIN/${t}_perf is not built (scripts/build.sh build)"; exit 1; }
done

# A fresh results directory; only one this script made is emptied.
if [ -e "$out" ]; then
  if [ -f "$out/.trnccl-bench-results" ]; then
    rm -rf -- "$out"
  elif [ -d "$out" ] && [ -z "$(ls -A -- "$out")" ]; then
    :
  else
    say "$out exists and was not made by scripts/bench.sh; choose another --out"
    exit 2
  fi
fi
mkdir -p "$out/logs" "$out/micro" || exit 1
touch "$out/.trnccl-bench-results"
commands="$out/commands.txt"
: >"$commands"

git_rev="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  git_rev="$git_rev (dirty: uncommitted changes)"
fi
{
  echo "started: $(date '+%Y-%m-%d %H:%M %Z')"
  echo "mode: $([ "$quick" -eq 1 ] && echo 'quick (smoke test, tiny sizes)' || echo 'standard sweep')"
  echo "trnccl: $git_rev"
  gb="$(dpkg-query -W -f='${Version}' libbenchmark-dev 2>/dev/null || true)"
  [ -n "$gb" ] && echo "google-benchmark: $gb (Debian libbenchmark-dev)"
} >"$out/run-info.txt"

# The machine's cross-core copy speed before and after (bench/cross_core_probe.cpp says why).
probe_cross_core() {
  if [ -x "$BIN/cross_core_probe" ] && [ "$(nproc)" -ge 2 ]; then
    echo "cross-core copy ($1): $("$BIN/cross_core_probe" -n 100 -R 5 2>&1 | head -1)" \
      >>"$out/run-info.txt"
  fi
}
probe_cross_core start

failures=0
# Runs one command: prints and records it, tees its output to a log, counts a failure.
run_logged() {
  local log="$1"
  shift
  local line
  line="$(printf '%q ' "$@")"
  line="${line% }"
  echo "+ $line"
  echo "$line" >>"$commands"
  "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then
    say "FAILED (exit $rc): $line"
    failures=$((failures + 1))
  fi
  return 0
}

start=$SECONDS
for spec in "${SWEEP[@]}"; do
  IFS='|' read -r np sizes iters <<<"$spec"
  np="${np// /}"
  read -ra size_flags <<<"$sizes"
  read -ra iter_flags <<<"$iters"
  extra=(-np "$np")
  [ "$np" -gt "$(nproc)" ] && extra+=(--oversubscribe)
  for t in "${TOOLS[@]}"; do
    exe="$BIN/${t}_perf"
    run_logged "$out/logs/${t}_${np}ranks.txt" \
      timeout -k 10 "$run_timeout" "${MPIRUN[@]}" "${extra[@]}" \
      --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo \
      "$exe" "${size_flags[@]}" "${iter_flags[@]}" -c 0 -M 1 -R "$repeats" -J "$out/${t}_${np}ranks.jsonl"
  done
done
say "collectives took $((SECONDS - start)) s"

# The efa transport over libfabric on loopback: raw libfabric against the transport (ping-pong
# latency, streamed bandwidth), then all-reduce over TRNCCL_TRANSPORT=efa beside Open MPI
# over its tcp BTL and over its ofi MTL with the same provider.
estart=$SECONDS
mkdir -p "$out/efa" || exit 1
if [ "$quick" -eq 1 ]; then
  pp_flags=(-b 8 -e 64K -f 64 -n 50 -R 2)
  efa_sizes=(-b 1M -e 4M -f 4 -n 3 -w 1)
else
  pp_flags=(-b 8 -e 16M -f 8 -n 200 -R 5)
  # From 256 KiB with 5 warm-ups: the first size otherwise carries the connection set-up and
  # first registrations (1 MiB out of place measured 504 us against 282 in place right after).
  efa_sizes=(-b 256K -e 64M -f 4 -n 10 -w 5)
fi
for prov in net "tcp;ofi_rxm" shm; do
  run_logged "$out/efa/fabric_pingpong_${prov%%;*}.txt" \
    timeout -k 10 "$run_timeout" env FI_TCP_IFACE=lo FI_NET_IFACE=lo \
    "$BIN/fabric_pingpong" -p "$prov" "${pp_flags[@]}"
done
# trnccl over net (its default over TCP) beside the BTL and the MTL, and over tcp;ofi_rxm beside
# the MTL on that same provider. Open MPI 4.1's ofi MTL cannot open net (libfabric 1.17: the
# endpoint's listen fails), so tcp;ofi_rxm is the MTL's provider in both.
efa_vs_mpi() {  # trnccl provider, file tag, what Open MPI runs (its mpirun arguments)
  local prov="$1" tag="$2"
  shift 2
  run_logged "$out/logs/all_reduce_efa_$tag.txt" \
    timeout -k 10 "$run_timeout" "${MPIRUN[@]}" -np 2 -x TRNCCL_TRANSPORT=efa \
    -x "TRNCCL_FI_PROVIDER=$prov" -x FI_TCP_IFACE=lo -x FI_NET_IFACE=lo \
    --mca oob_tcp_if_include lo "$@" \
    "$BIN/all_reduce_perf" "${efa_sizes[@]}" -c 0 -M 1 -R "$repeats" \
    -J "$out/efa/all_reduce_efa_$tag.jsonl"
}
BTL=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo)
MTL=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "tcp;ofi_rxm")
efa_vs_mpi net net_vs_mpi_tcp_btl "${BTL[@]}"
efa_vs_mpi net net_vs_mpi_ofi_mtl "${MTL[@]}"
efa_vs_mpi "tcp;ofi_rxm" tcp_vs_mpi_ofi_mtl "${MTL[@]}"
say "efa benchmarks took $((SECONDS - estart)) s"

# Topology: hierarchical against the flat ring and Open MPI on 2 emulated nodes x 2 ranks.
tstart=$SECONDS
topo_flags=(--out "$out")
[ "$quick" -eq 1 ] && topo_flags+=(--quick)
run_logged "$out/logs/topology.txt" bash scripts/bench_topology.sh "${topo_flags[@]}"
say "topology benchmark took $((SECONDS - tstart)) s"

mstart=$SECONDS
for m in "${MICRO_BENCHES[@]}"; do
  if [ ! -x "$BIN/$m" ]; then
    say "note: skipping $m: $BIN/$m is not built"
    continue
  fi
  run_logged "$out/logs/$m.txt" timeout -k 10 "$run_timeout" "$BIN/$m" "${MICRO_FLAGS[@]}" \
    --benchmark_out="$out/micro/$m.json" --benchmark_out_format=json
done
say "micro benchmarks took $((SECONDS - mstart)) s"
echo "finished: $(date '+%Y-%m-%d %H:%M %Z') ($((SECONDS - start)) s)" >>"$out/run-info.txt"
probe_cross_core end

plots="$docs/perf"
report="$docs/PERFORMANCE.md"
mkdir -p "$plots" || exit 1
rm -f -- "$plots"/*.png  # plots of an earlier run would be linked as if measured now
shopt -s nullglob
jsonl=("$out"/*.jsonl)
shopt -u nullglob
status=0
if [ ${#jsonl[@]} -gt 0 ]; then
  echo "+ $PY bench/plot/plot.py $plots ${jsonl[*]}"
  "$PY" bench/plot/plot.py "$plots" "${jsonl[@]}" || status=1
else
  say "no JSON rows were written: no plots"
  status=1
fi
echo "+ $PY bench/plot/report.py $out -o $report --plots $plots"
"$PY" bench/plot/report.py "$out" -o "$report" --plots "$plots" || status=1

say "results in $out; report $report; plots $plots/ ($((SECONDS - start)) s in all)"
if [ "$failures" -gt 0 ]; then
  say "$failures run(s) failed: see $out/logs/"
  status=1
fi
exit "$status"
