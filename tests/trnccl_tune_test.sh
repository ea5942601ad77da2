#!/usr/bin/env bash
# trnccl-tune as a user runs it: two ranks under trnccl-run measure every link class this
# machine has (shm, efa over libfabric on loopback, neuronlink emulated), write a tuning file
# that trnccl-topo reads back, and a job planning with it (TRNCCL_TUNING_FILE) runs and says so.
# Usage: trnccl_tune_test.sh TRNCCL_TUNE TRNCCL_TOPO TRNCCL_RUN ALL_REDUCE_PERF
set -uo pipefail
tune="$1" topo="$2" run="$3" perf="$4"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {
  local what="$1"
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fail=1; fi
}
unset TRNCCL_TOPO_FILE TRNCCL_TOPO_PRESET TRNCCL_TUNING_FILE TRNCCL_TRANSPORT TRNCCL_ALGO
export FI_TCP_IFACE=lo FI_NET_IFACE=lo  # loopback only

check "trnccl-tune ran on 2 ranks" "$run" -np 2 "$tune" --quick -o "$tmp/host.tuning"
cat "$tmp/host.tuning"
for class in shm efa neuronlink; do
  check "  ... measured $class" grep -q "^# $class: 8 B exchange" "$tmp/host.tuning"
done
check "  ... every number positive" \
  awk '/^link/ { split($3, a, "="); split($4, b, "="); if (a[2] <= 0 || b[2] <= 0) exit 1 }
       /^(copy|reduce)_gbps/ { if ($2 <= 0) exit 1 }' "$tmp/host.tuning"
check "trnccl-topo plans with it" \
  bash -c "'$topo' --ranks-per-node 4 --plan --tuning '$tmp/host.tuning' | grep -q 'costs: TRNCCL_TUNING_FILE=$tmp/host.tuning'"
TRNCCL_TUNING_FILE="$tmp/host.tuning" TRNCCL_DEBUG=INFO \
  "$run" -np 2 "$perf" -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 > "$tmp/job.out" 2>&1
check "a job with TRNCCL_TUNING_FILE runs and checks its results" \
  grep -q "Out of bounds values : 0 OK" "$tmp/job.out"
check "  ... and plans with the file's numbers" grep -q "costs: TRNCCL_TUNING_FILE=" "$tmp/job.out"
check "--help describes the tool" bash -c "'$tune' --help | grep -q 'trnccl-run -np 2 trnccl-tune'"
exit $fail
