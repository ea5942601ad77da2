#!/usr/bin/env bash
# The MoE dispatch benchmark (issue 17): moe_dispatch_perf under mpirun, so that the engine's
# round trip, the hand-written dispatch over Open MPI and the same over trncclAllToAllv are
# timed side by side in each run. Layouts: 2 ranks and 4 ranks (oversubscribed on a 2-core
# machine) on shared memory, and 2 emulated nodes x 2 ranks (TRNCCL_HOSTID; efa over
# libfabric on loopback between the nodes, Open MPI's tcp BTL as if the hosts were apart; and,
# as root, on 2 emulated hosts, scripts/emulated_node_ssh.sh, where Open MPI uses vader inside
# a host and TCP between them);
# uniform and Zipf-1.2 routing; fp8 payloads (e4m3 with per-token scales, combine in bf16) on
# shared memory, uniform; the engine's outputs in trncclMemAlloc memory (-A 1); the engine
# with TRNCCL_MOE_DIRECT=0 (rows over the shm rings); several rounds, so the summary gives
# ranges.
# Usage: scripts/bench_moe.sh [--quick] [--rounds N] [--out DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=build/bench
dir=build/bench-results/moe
rounds=3 quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 rounds=1 ;;
    --rounds) rounds="$2"; shift ;;
    --out) dir="$2"; shift ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
    *) echo "bench_moe: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$BIN/moe_dispatch_perf" ] || { echo "bench_moe: build first (scripts/build.sh build)"; exit 1; }
command -v mpirun >/dev/null || { echo "bench_moe: mpirun not found (openmpi-bin)"; exit 1; }
rm -rf -- "$dir"
mkdir -p "$dir" || exit 1
if [ "$quick" -eq 1 ]; then
  shape=(-T 128 -H 512 -K 4 -E 16 -n 2 -w 1 -r 1)
else
  shape=(-T 256,2048 -H 2048 -K 4 -E 16 -n 5 -w 2 -r 3)
fi
MPIRUN=(mpirun --oversubscribe --mca oob_tcp_if_include lo --mca pml ob1
        --mca btl_tcp_if_include lo -x FI_TCP_IFACE=lo -x FI_NET_IFACE=lo)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
# Open MPI's emulated hosts (scripts/emulated_node_ssh.sh): each believes it owns every core.
HOSTS=(--host nodea:2,nodeb:2 --bind-to none --mca mpi_yield_when_idle 1
       --mca plm_rsh_agent "$PWD/scripts/emulated_node_ssh.sh")
hosts=0
unshare --uts true 2>/dev/null && hosts=1
failures=0
extra=()  # more moe_dispatch_perf flags for the next runs (the payload type)
run() {  # layout tag, ranks, Open MPI btl, zipf, round, [-m MODE], [wrapper...]
  local tag="$1" np="$2" btl="$3" zipf="$4" round="$5" mode=(-m normal)
  shift 5
  if [ "${1:-}" = "-m" ]; then mode=(-m "$2"); shift 2; fi
  local cmd=("${MPIRUN[@]}" -np "$np" --mca btl "$btl" "$@" "$BIN/moe_dispatch_perf"
             "${shape[@]}" "${extra[@]}" "${mode[@]}" -z "$zipf" -c 1
             -J "$dir/${tag}_z${zipf}_round${round}.jsonl")
  echo "+ ${cmd[*]}" | tee -a "$dir/commands.txt"
  timeout -k 10 900 "${cmd[@]}" >>"$dir/log.txt" 2>&1 ||
    { echo "FAILED: ${cmd[*]}"; failures=$((failures + 1)); }
}
for round in $(seq 1 "$rounds"); do
  # Decode-sized batches: the low-latency mode beside the normal one, same run conditions.
  for mode in normal low_latency; do
    cmd=("${MPIRUN[@]}" -np 2 --mca btl self,vader "$BIN/moe_dispatch_perf" -T 8,128 -H 2048
         -K 4 -E 16 -m "$mode" -n 20 -w 5 -r 3 -c 1 -J "$dir/decode_${mode}_z0_round${round}.jsonl")
    echo "+ ${cmd[*]}" | tee -a "$dir/commands.txt"
    timeout -k 10 900 "${cmd[@]}" >>"$dir/log.txt" 2>&1 ||
      { echo "FAILED: ${cmd[*]}"; failures=$((failures + 1)); }
  done
  for zipf in 0 1.2; do
    run shm2 2 self,vader "$zipf" "$round"
    run shm4 4 self,vader "$zipf" "$round"
    for mode in normal hierarchical; do
      run "nodes2x2_$mode" 4 self,tcp "$zipf" "$round" -m "$mode" \
        bash -c 'TRNCCL_HOSTID=node-$((OMPI_COMM_WORLD_RANK / 2)) exec "$@"' rank
    done
    [ "$hosts" -eq 1 ] &&
      run hosts2x2_hierarchical 4 self,vader,tcp "$zipf" "$round" -m hierarchical "${HOSTS[@]}"
  done
  extra=(-d fp8)
  run shm2_fp8 2 self,vader 0 "$round"
  run shm4_fp8 4 self,vader 0 "$round"
  # The engine's outputs in trncclMemAlloc memory: combine reads the experts' outputs in place.
  extra=(-A 1)
  for zipf in 0 1.2; do run shm2_memalloc 2 self,vader "$zipf" "$round"; done
  run shm4_memalloc 4 self,vader 0 "$round"
  extra=()
  # The same engine with its rows over the shm rings instead of peers' mapped staging.
  run shm2_rings 2 self,vader 0 "$round" -x TRNCCL_MOE_DIRECT=0
done
{
  echo "machine: $(nproc) cores, $(uname -r); $(date -u +%Y-%m-%d)"
  echo "shape: ${shape[*]}, $rounds round(s)"
} >"$dir/machine.txt"
/usr/bin/python3 bench/plot/moe_summary.py "$dir" >"$dir/summary.md" || failures=$((failures + 1))
cat "$dir/summary.md"
[ "$failures" -eq 0 ]
