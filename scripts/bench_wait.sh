#!/usr/bin/env bash
# What waiting costs, spinning beside sleeping (bench/perf/wait_perf.cpp): ROUNDS separate runs
# of `trnccl-run -np 2 wait_perf -R 3` over shm and efa (tcp;ofi_rxm on loopback). Writes the
# tables to build/bench-results/wait/summary.md (bench/plot/report.py includes it).
#   bash scripts/bench_wait.sh [--rounds R] [--quick]
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=3
flags=(-R 3)
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --quick) rounds=1; flags=(-R 1 -l 0.3 -n 200); shift ;;
    -h|--help) sed -n 2,5p "$0"; exit 0 ;;
    *) echo "bench_wait: unknown argument $1 (see --help)"; exit 2 ;;
  esac
done
BIN=build/bench
[ -x "$BIN/wait_perf" ] || { echo "bench_wait: build first (bash scripts/build.sh build)"; exit 1; }
out=build/bench-results/wait
rm -rf "$out" && mkdir -p "$out" || exit 1
failures=0
for round in $(seq 1 "$rounds"); do
  cmd=("$BIN/trnccl-run" -np 2 "$BIN/wait_perf" "${flags[@]}")
  echo "+ ${cmd[*]}" >>"$out/commands.txt"
  timeout -k 10 600 "${cmd[@]}" >"$out/round${round}.txt" 2>&1 ||
    { echo "bench_wait: round $round failed (see $out)"; failures=$((failures + 1)); }
done
{
  echo "\`bash scripts/bench_wait.sh\`: $rounds separate runs of \`trnccl-run -np 2 wait_perf ${flags[*]}\` on"
  echo "$(date -u +%Y-%m-%d), $(nproc) cores. Rank 1 joins an all-reduce 2 s after rank 0; cpu_s is"
  echo "the CPU time (user + system, whole process) rank 0 used while blocked, wake_us the delay"
  echo "from rank 1's arrival to rank 0's return, lat_us the median 8 B all-reduce. \"spin\" is"
  echo "TRNCCL_SPIN_TIME_US=-1 (the policy before the wait policy), \"sleep\" the default, and"
  echo "over efa also TRNCCL_EFA_SLEEP=1 (the default; \"spin\" sets 0, which yields)."
  echo "Each run prints medians [min-max] over its 3 interleaved repeats."
  echo
  for round in $(seq 1 "$rounds"); do
    echo "Run $round:"
    echo
    echo '```'
    grep -v '^$' "$out/round${round}.txt"
    echo '```'
    echo
  done
} >"$out/summary.md"
cat "$out/summary.md"
[ "$failures" -eq 0 ]
