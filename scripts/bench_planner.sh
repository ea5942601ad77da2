#!/usr/bin/env bash
# The planner benchmark (issue 16): for all-reduce, all-gather and reduce-scatter on 2 ranks,
# 4 ranks and 2 emulated nodes x 2 ranks (efa between them over libfabric on loopback), the
# planner's default and every algorithm that can run there, forced, side by side: one job per
# layout and collective times them all on their own communicators (the perf tools' -X),
# interleaved within each of --repeats repeats (default 3), so that the machine's state changes
# hit all of them alike; --rounds such jobs (default 2), 16 B-256 MiB (x4).
# bench/plot/planner_summary.py then gives, per size, the median time of each and the
# default's time over the fastest forced one's.
# Writes DIR/planner/*.jsonl and summary.md. With --tuning FILE every communicator (the
# default's and the forced ones) plans with that tuning file (TRNCCL_TUNING_FILE). With --tune
# trnccl-tune first measures each layout on that layout (DIR/planner/tuning-LAYOUT), and every
# job of the layout times the planner's choice with that file too ("tuned"), beside the
# default and the forced algorithms (issue 16: "after trnccl-tune the same holds").
# usage: bash scripts/bench_planner.sh [--quick] [--rounds N] [--repeats N] [--tuning FILE]
#                                      [--tune] [--out DIR] [--tools LIST] [--only LAYOUT:TOOL]...
#   LAYOUT is 2, 4 or 2x2; TOOL all_reduce, all_gather, reduce_scatter or broadcast; --tools
#   (comma separated) says which tools run, default the three of issue 16's target
#   (all_reduce,all_gather,reduce_scatter); --only narrows to single layout:tool pairs
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
quick=0 rounds=2 repeats=3 tuning="" tune=0 out=build/bench-results only=()
tools="all_reduce,all_gather,reduce_scatter"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --rounds) rounds="$2"; shift ;;
    --repeats) repeats="$2"; shift ;;
    --only) only+=("$2"); shift ;;
    --tools) tools="$2"; shift ;;
    --tuning) tuning="$(realpath "$2")"; shift ;;
    --out) out="$2"; shift ;;
    --tune) tune=1 ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) echo "bench_planner: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
BIN=build/bench
dir="$out/planner"
rm -rf -- "$dir"
mkdir -p "$dir" || exit 1
if [ "$quick" -eq 1 ]; then
  rounds=1 repeats=1 small=(-b 16 -e 4K -f 16 -n 3 -w 1) large=(-b 1M -e 1M -n 2 -w 1)
else
  small=(-b 16 -e 256K -f 4 -n 20 -w 3) large=(-b 1M -e 256M -f 4 -n 3 -w 1)
fi
# Forced algorithms per layout and collective ("default" = TRNCCL_ALGO unset).
declare -A ALGOS=(
  [one:all_reduce]="default direct ring rd rhd"
  [one:all_gather]="default direct ring bruck"
  [one:reduce_scatter]="default direct ring"
  [nodes:all_reduce]="default ring rd rhd hierarchical"
  [nodes:all_gather]="default ring bruck hierarchical"
  [nodes:reduce_scatter]="default ring hierarchical"
  [one:broadcast]="default direct ring binomial"
  [nodes:broadcast]="default ring binomial hierarchical"
)
declare -A KIND=([all_reduce]=allreduce [all_gather]=allgather [reduce_scatter]=reducescatter
                 [broadcast]=broadcast)
failures=0
on_layout() {  # ranks, host id rule, command...: runs the command on that layout
  local np="$1" hostid="$2"
  shift 2
  timeout -k 10 1800 env -u TRNCCL_ALGO TRNCCL_TUNING_FILE="$tuning" FI_TCP_IFACE=lo \
    FI_NET_IFACE=lo "$BIN/trnccl-run" -np "$np" bash -c "TRNCCL_HOSTID=$hostid exec \"\$@\"" rank "$@"
}
run() {  # layout name, ranks, host id rule, tool, algorithms, round
  local layout="$1" np="$2" hostid="$3" tool="$4" algos="$5" round="$6"
  local forced=() algo part sizes
  for algo in $algos; do
    if [ "$algo" = default ]; then forced+=(-X default); else forced+=(-X "${KIND[$tool]}:$algo"); fi
  done
  [ "$tune" -eq 1 ] && forced+=(-X "tuned=$(realpath "$dir/tuning-$layout")")
  for part in small large; do
    if [ "$part" = small ]; then sizes=("${small[@]}"); else sizes=("${large[@]}"); fi
    local cmd=(on_layout "$np" "$hostid"
               "$BIN/${tool}_perf" "${sizes[@]}" -R "$repeats" -c 0 "${forced[@]}"
               -J "$dir/${layout}_${tool}_round${round}.jsonl")
    echo "+ ${cmd[*]}" >>"$dir/commands.txt"
    "${cmd[@]}" >>"$dir/log.txt" 2>&1 || {
      echo "FAILED: ${cmd[*]}"; failures=$((failures + 1)); }
  done
}
wanted_layout() {  # layout: whether --only asks for any tool on it (or there is no --only)
  [ ${#only[@]} -eq 0 ] && return 0
  local pair
  for pair in "${only[@]}"; do [ "${pair%%:*}" = "$1" ] && return 0; done
  return 1
}
wanted() {  # layout tool: whether --only asks for it (or there is no --only)
  [ ${#only[@]} -eq 0 ] && return 0
  local pair
  for pair in "${only[@]}"; do [ "$pair" = "$1:$2" ] && return 0; done
  return 1
}
layout_of() {  # layout: sets np, kind and hostid
  case "$1" in
    2) np=2 kind=one hostid=node ;;
    4) np=4 kind=one hostid=node ;;
    2x2) np=4 kind=nodes hostid='node-$((TRNCCL_RANK / 2))' ;;
  esac
}
if [ "$tune" -eq 1 ]; then
  for layout in 2 4 2x2; do
    wanted_layout "$layout" || continue
    layout_of "$layout"
    tune_args=()
    [ "$quick" -eq 1 ] && tune_args=(--quick)
    echo "+ trnccl-tune on layout $layout" >>"$dir/commands.txt"
    on_layout "$np" "$hostid" build/src/trnccl-tune "${tune_args[@]}" -o "$dir/tuning-$layout" \
      >>"$dir/log.txt" 2>&1 || { echo "FAILED: trnccl-tune on layout $layout"; exit 1; }
  done
fi
for round in $(seq 1 "$rounds"); do
  for tool in ${tools//,/ }; do
    [ -n "${KIND[$tool]:-}" ] || { echo "bench_planner: unknown tool $tool" >&2; exit 2; }
    for layout in 2 4 2x2; do
      wanted "$layout" "$tool" || continue
      layout_of "$layout"
      run "$layout" "$np" "$hostid" "$tool" "${ALGOS[$kind:$tool]}" "$round"
    done
  done
done
/usr/bin/python3 bench/plot/planner_summary.py "$dir" >"$dir/summary.md" || failures=$((failures + 1))
cat "$dir/summary.md"
[ "$failures" -eq 0 ]
