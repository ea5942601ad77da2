#!/usr/bin/env bash
# The topology benchmark (issue 15): 4 ranks as 2 emulated nodes x 2 ranks (TRNCCL_HOSTID by
# rank), shm inside a node and efa (libfabric on loopback) between the nodes. all_reduce_perf
# 1-64 MiB with the hierarchical schedule and with the flat ring, in alternating rounds, each
# run also timing Open MPI's MPI_Allreduce on the same buffers (-M 1): with its shared memory
# (vader) between all four ranks; with TCP between all of them; and, as root, on 2 emulated
# hosts (scripts/emulated_node_ssh.sh: each pair of ranks under its own host name, so Open MPI
# uses vader inside a host and TCP between them -- the same 2 x 2 layout as trnccl's, which
# there tells the nodes apart by their names instead of TRNCCL_HOSTID). Then one run per
# schedule with TRNCCL_TRAFFIC_DIR, to measure the bytes that crossed efa per rank against the
# model. Writes DIR/topology/*.jsonl, traffic_*.txt and summary.md (bench/plot/topology_summary.py).
# usage: bash scripts/bench_topology.sh [--quick] [--out DIR]   (run after scripts/build.sh)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
quick=0
out=build/bench-results
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --out) out="$2"; shift ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) echo "bench_topology: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
BIN=build/bench
dir="$out/topology"
rm -rf -- "$dir"
mkdir -p "$dir" || exit 1
if [ "$quick" -eq 1 ]; then
  rounds=1 sizes=(-b 1M -e 4M -f 4 -n 3 -w 1)
else
  rounds=5 sizes=(-b 1M -e 64M -f 4 -n 10 -w 2)
fi
MPIRUN=(mpirun --oversubscribe -np 4 --mca oob_tcp_if_include lo)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
# Open MPI's paths: shared memory between all four ranks (what it does on one host), TCP
# between all of them (as if every rank were on its own host), and 2 emulated hosts.
declare -A MPI_BTL=([vader]="self,vader" [tcp]="self,tcp" [hosts]="self,vader,tcp")
paths=(vader tcp)
NODE_IDS=(bash -c 'TRNCCL_HOSTID=node-$((OMPI_COMM_WORLD_RANK / 2)) exec "$@"' rank)
# Each emulated host believes it owns every core: no binding, and Open MPI yields when idle as
# it does when it knows it is oversubscribed.
HOSTS=(--host nodea:2,nodeb:2 --bind-to none --mca mpi_yield_when_idle 1
       --mca plm_rsh_agent "$PWD/scripts/emulated_node_ssh.sh")
if unshare --uts true 2>/dev/null; then
  paths+=(hosts)
else
  echo "bench_topology: no emulated hosts for Open MPI (unshare --uts needs root); vader and tcp only"
fi
failures=0
run() {  # algo, Open MPI path, round
  local algo="$1" btl="$2" round="$3"
  local launch=("${NODE_IDS[@]}")
  [ "$btl" = hosts ] && launch=("${HOSTS[@]}")
  local cmd=("${MPIRUN[@]}" --mca pml ob1 --mca btl "${MPI_BTL[$btl]}" --mca btl_tcp_if_include lo
             -x "TRNCCL_ALGO=allreduce:$algo" -x FI_TCP_IFACE=lo -x FI_NET_IFACE=lo
             "${launch[@]}" "$BIN/all_reduce_perf" "${sizes[@]}" -c 0 -M 1 -R 1
             -J "$dir/all_reduce_${algo}_mpi_${btl}_round${round}.jsonl")
  echo "+ ${cmd[*]}" | tee -a "$dir/commands.txt"
  timeout -k 10 600 "${cmd[@]}" >>"$dir/log.txt" 2>&1 || { echo "FAILED: ${cmd[*]}"; failures=$((failures + 1)); }
}
for round in $(seq 1 "$rounds"); do
  for btl in "${paths[@]}"; do
    for algo in hierarchical ring; do run "$algo" "$btl" "$round"; done
  done
done
# Bytes over efa per rank: one 16 MiB all-reduce out of place and one in place per schedule.
for algo in hierarchical ring; do
  traffic="$dir/traffic_$algo"
  mkdir -p "$traffic"
  timeout -k 10 300 env TRNCCL_ALGO="allreduce:$algo" TRNCCL_TRAFFIC_DIR="$traffic" \
    FI_TCP_IFACE=lo FI_NET_IFACE=lo "$BIN/trnccl-run" -np 4 \
    bash -c 'TRNCCL_HOSTID=node-$((TRNCCL_RANK / 2)) exec "$@"' rank \
    "$BIN/all_reduce_perf" -b 16M -e 16M -n 1 -w 0 -c 0 >>"$dir/log.txt" 2>&1 ||
    failures=$((failures + 1))
  build/src/trnccl-topo --stats "$traffic" >"$dir/traffic_$algo.txt" || failures=$((failures + 1))
done
/usr/bin/python3 bench/plot/topology_summary.py "$dir" >"$dir/summary.md" || failures=$((failures + 1))
cat "$dir/summary.md"
[ "$failures" -eq 0 ]
