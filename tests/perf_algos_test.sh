#!/usr/bin/env bash
# The perf tools' -X (algorithms side by side, one communicator each), as the planner
# benchmark uses it: every named algorithm is really forced on its communicator (its plan line
# says so), every one's results are checked and reported per size in the table and the JSON,
# and a name that cannot run, or does not exist, ends the tool with a message naming it.
# Usage: perf_algos_test.sh TRNCCL_RUN ALL_REDUCE_PERF ALL_GATHER_PERF
set -uo pipefail
run="$1" allreduce="$2" allgather="$3"
. "$(dirname "$0")/check_lib.sh"  # tmp, fail, check
unset TRNCCL_TOPO_FILE TRNCCL_TOPO_PRESET TRNCCL_TUNING_FILE TRNCCL_TRANSPORT TRNCCL_ALGO
export FI_TCP_IFACE=lo FI_NET_IFACE=lo  # loopback only

check "all-reduce, 3 ranks, default + ring + rhd + direct, checked" \
  env TRNCCL_DEBUG=INFO "$run" -np 3 "$allreduce" -b 8 -e 1M -f 32 -n 3 -w 1 -R 2 -c 1 \
  -X default -X allreduce:ring -X rhd -X direct -J "$tmp/ar.jsonl" >"$tmp/ar.out" 2>"$tmp/ar.err"
cat "$tmp/ar.out"
for forced in allreduce:ring rhd direct; do
  algo=${forced#*:}
  check "  ... $forced forced on its communicator" \
    grep -q "INFO $forced rank 0 plan: AllReduce=$algo(TRNCCL_ALGO)" "$tmp/ar.err"
done
check "  ... default left to the planner" \
  grep -Eq "INFO default rank 0 plan: AllReduce=[a-z]+ " "$tmp/ar.err"
check "  ... one JSON row per size and algorithm, none wrong" python3 - "$tmp/ar.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
out = {(r["size"], r["algo"]) for r in rows if r["placement"] == "out"}
sizes = {s for s, _ in out}
want = {"default", "allreduce:ring", "rhd", "direct"}
assert sizes == {8, 256, 8192, 262144}, sizes
assert out == {(s, a) for s in sizes for a in want}, out
assert all(r["wrong"] == 0 and r["time_us"] > 0 for r in rows), rows
PY
check "  ... the table has a column per extra algorithm" \
  grep -Eq "#wrong +ring +rhd +direct$" "$tmp/ar.out"

# (The tool's output goes to a file, and check's verdict after it to the log.)
"$run" -np 3 "$allgather" -b 96 -e 96K -f 32 -n 2 -w 1 -c 1 -X default -X allgather:bruck \
  -J "$tmp/ag.jsonl" >"$tmp/ag.out" 2>&1
check "all-gather with bruck beside the default" test $? -eq 0
check "  ... bruck rows present" grep -q '"algo":"allgather:bruck"' "$tmp/ag.jsonl"

# -X tuned=FILE (bench_planner.sh --tune): the planner's choice with a tuning file, beside the
# default's, whose communicator (split after it) must not inherit the file. A file that makes
# the shared-window protocol dear moves the plan off direct.
printf 'trnccl-tuning 1\nsync_us 500\n' >"$tmp/dear-sync.tuning"
TRNCCL_DEBUG=INFO "$run" -np 2 "$allreduce" -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 \
  -X "tuned=$tmp/dear-sync.tuning" -X default -J "$tmp/tuned.jsonl" >"$tmp/tuned.out" 2>"$tmp/tuned.err"
check "all-reduce, tuned=FILE beside the default, checked" test $? -eq 0
check "  ... its communicator plans with the file, and not with direct" \
  grep -Eq "INFO tuned rank 0 plan: AllReduce=[a-z]+(<=[0-9]+[KM]?,[a-z]+)* AllGather=.*costs: TRNCCL_TUNING_FILE=$tmp/dear-sync.tuning" "$tmp/tuned.err"
check "  ... (direct nowhere in its all-reduce plan)" \
  bash -c "! grep -q 'INFO tuned rank 0 plan: AllReduce=[^ ]*direct' '$tmp/tuned.err'"
check "  ... the default's, split after it, with this machine's defaults" \
  grep -q "INFO default rank 0 plan: .*costs: this machine's defaults" "$tmp/tuned.err"
check "  ... rows for both" \
  bash -c "grep -q '\"algo\":\"tuned=$tmp/dear-sync.tuning\"' '$tmp/tuned.jsonl' && grep -q '\"algo\":\"default\"' '$tmp/tuned.jsonl'"

"$run" -np 2 "$allreduce" -b 8 -e 8 -n 1 -w 0 -X default -X allreduce:hierarchical \
  >"$tmp/hier.out" 2>&1
check "hierarchical on one node refused" test $? -ne 0
check "  ... naming it and why" \
  grep -q "all_reduce_perf rank 0 -X allreduce:hierarchical: .*hierarchical.*one node" \
  "$tmp/hier.out"

"$run" -np 2 "$allreduce" -b 8 -e 8 -n 1 -w 0 -X nosuch >"$tmp/bad.out" 2>&1
check "an unknown name refused" test $? -ne 0
check "  ... naming it" grep -q "rank 0: -X nosuch: .*unknown algorithm 'nosuch'" "$tmp/bad.out"

"$allreduce" -X 2>"$tmp/noval.err"
check "-X without a name refused before any rank starts" test $? -eq 2
[ "$fail" -eq 0 ]
