#!/usr/bin/env bash
# trnccl-tune as a user runs it: two ranks under trnccl-run measure every link class this
# machine has (shm, efa over libfabric on loopback, neuronlink emulated), write a tuning file
# that trnccl-topo reads back, and a job planning with it (TRNCCL_TUNING_FILE) runs and says so;
# four ranks on two emulated nodes measure shm inside the nodes and efa across them;
# then --moe on 4 ranks over 2 emulated nodes adds its moe entries to the same file, and a MoE
# job in auto mode takes its mode from them.
# Usage: trnccl_tune_test.sh TRNCCL_TUNE TRNCCL_TOPO TRNCCL_RUN ALL_REDUCE_PERF MOE_DISPATCH_PERF
set -uo pipefail
tune="$1" topo="$2" run="$3" perf="$4" moe="$5"
. "$(dirname "$0")/check_lib.sh"  # tmp, fail, check
unset TRNCCL_TOPO_FILE TRNCCL_TOPO_PRESET TRNCCL_TUNING_FILE TRNCCL_TRANSPORT TRNCCL_ALGO
export FI_TCP_IFACE=lo FI_NET_IFACE=lo  # loopback only

check "trnccl-tune ran on 2 ranks" "$run" -np 2 "$tune" --quick -o "$tmp/host.tuning"
cat "$tmp/host.tuning"
for class in shm efa neuronlink; do
  check "  ... measured $class with ring all-gathers" \
    grep -q "^# round 1, $class: ring all-gather on 2 ranks, .* -> alpha [0-9.]* us, [0-9.]* GB/s" "$tmp/host.tuning"
done
check "  ... and the direct schedules' figures" \
  grep -q "^# round 1, direct: direct on 2 ranks: all-reduce 1 KiB .* -> copy [0-9.]* GB/s, reduce [0-9.]* GB/s" "$tmp/host.tuning"
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
check "--help describes the tool" bash -c "'$tune' --help | grep -q 'trnccl-run -np N trnccl-tune'"

# On the layout of a job of 2 nodes x 2 ranks: shm inside each node (both at once), efa across.
TRNCCL_DEBUG=INFO "$run" -np 4 --hostids a,a,b,b "$tune" --quick -o "$tmp/nodes.tuning" \
  > "$tmp/nodes.out" 2>&1
check "trnccl-tune ran on 2 nodes x 2 ranks" grep -q "^# measured by trnccl-tune on .*(4 ranks on 2 node(s)" "$tmp/nodes.tuning"
check "  ... shm inside the nodes, efa across them" \
  bash -c "grep -q '^# round 1, shm: ring all-gather on 2 ranks' '$tmp/nodes.tuning' &&
           grep -q '^# round 1, efa: ring all-gather on 4 ranks' '$tmp/nodes.tuning'"
if [ "$(nproc)" -lt 4 ]; then
  # Each node's 2-rank communicator is split from the 4-rank one: its ranks still share the
  # machine's cores with the other node's, so its waits must yield as the parent's do.
  check "  ... its 2-rank node communicators count the job's 4 ranks on $(nproc) cores" \
    bash -c "[ \$(grep -c 'trnccl INFO trnccl-tune rank [01]/2: .*; spin 0 passes' '$tmp/nodes.out') -ge 4 ]"
fi
check "  ... and trnccl-topo reads the file" \
  bash -c "'$topo' --nodes 2 --ranks-per-node 2 --plan --tuning '$tmp/nodes.tuning' >/dev/null"

cp "$tmp/host.tuning" "$tmp/before.tuning"
check "trnccl-tune --moe ran on 4 ranks over 2 nodes" \
  "$run" -np 4 --hostids a,b "$tune" --moe --quick -H 64 -T 4,64 -o "$tmp/host.tuning"
cat "$tmp/host.tuning"
check "  ... one moe entry per batch size, each naming the fastest of the three modes" \
  bash -c "[ \$(grep -cE '^moe ranks=4 nodes=2 tokens=(4|64) mode=(normal|low_latency|hierarchical) .*# normal [0-9.]+, low_latency [0-9.]+, hierarchical [0-9.]+\$' '$tmp/host.tuning') = 2 ]"
check "  ... and the file's other lines kept" \
  bash -c "grep -v '^moe\|^# moe' '$tmp/host.tuning' | cmp -s - '$tmp/before.tuning'"
check "a second run replaces its own entries only" \
  bash -c "'$run' -np 4 --hostids a,b '$tune' --moe --quick -H 64 -T 8 -o '$tmp/host.tuning' >/dev/null &&
           [ \$(grep -c '^moe ranks=4 nodes=2' '$tmp/host.tuning') = 1 ] &&
           grep -q '^moe ranks=4 nodes=2 tokens=8 ' '$tmp/host.tuning'"
TRNCCL_TUNING_FILE="$tmp/host.tuning" TRNCCL_DEBUG=INFO TRNCCL_DEBUG_SUBSYS=MOE \
  "$run" -np 4 --hostids a,b "$moe" -m auto -T 8 -H 64 -n 1 -w 0 -r 1 -c 1 > "$tmp/moe.out" 2>&1
check "a MoE job in auto mode takes its mode from the file" \
  grep -q "(auto: TRNCCL_TUNING_FILE=$tmp/host.tuning line [0-9]*, measured on 4 ranks over 2 nodes at 8 tokens" "$tmp/moe.out"
check "  ... and its results check" \
  awk '$1 == 8 { seen = 1; if ($NF != 0) bad = 1 } END { exit bad || !seen }' "$tmp/moe.out"
exit $fail
