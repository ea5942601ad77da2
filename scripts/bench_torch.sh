#!/usr/bin/env bash
# The torch backend beside gloo (bench/torch/torch_bench.py): ROUNDS separate runs of
# `trnccl-run -np 2 python3 bench/torch/torch_bench.py`, each alternating trnccl and gloo round
# by round. Writes build/bench-results/torch/summary.md (bench/plot/report.py includes it).
#   bash scripts/bench_torch.sh [--rounds R] [--quick]
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=3
flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --quick) rounds=1; flags=(--quick); shift ;;
    -h|--help) sed -n 2,5p "$0"; exit 0 ;;
    *) echo "bench_torch: unknown argument $1 (see --help)"; exit 2 ;;
  esac
done
BIN=build/bench
[ -f build/python/trnccl/torch.py ] || { echo "bench_torch: build first (bash scripts/build.sh build; needs python3-torch)"; exit 1; }
out=build/bench-results/torch
rm -rf "$out" && mkdir -p "$out" || exit 1
failures=0
for round in $(seq 1 "$rounds"); do
  cmd=("$BIN/trnccl-run" -np 2 /usr/bin/python3 -W ignore bench/torch/torch_bench.py "${flags[@]}"
       -J "$out/round${round}.json")
  echo "+ ${cmd[*]}" >>"$out/commands.txt"
  PYTHONPATH=build/python timeout -k 10 1200 "${cmd[@]}" 2>"$out/round${round}.err" \
    >"$out/round${round}.txt" ||
    { echo "bench_torch: round $round failed (see $out)"; failures=$((failures + 1)); }
done
{
  echo "\`bash scripts/bench_torch.sh\`: $rounds separate runs of \`trnccl-run -np 2 python3"
  echo "bench/torch/torch_bench.py ${flags[*]}\` on $(date -u +%Y-%m-%d), $(nproc) cores, torch"
  echo "$(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null) (Debian). Each run alternates the contenders"
  echo "round by round and prints medians; gloo runs over TCP on loopback in the same job."
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
