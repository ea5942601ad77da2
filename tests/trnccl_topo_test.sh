#!/usr/bin/env bash
# trnccl-topo as a user runs it: a preset's dump loads back the same, a sysfs fixture tree is
# recognised, a job that does not fit is refused, a 1024-rank job prints at once, --plan gives
# a plan for 1024 and 4096 ranks within a (generous) time bound and honours a tuning file
# (and refuses a malformed one naming the line), and --stats over a real job's traffic files
# (TRNCCL_TRAFFIC_DIR) shows NeuronLink only on linked chips.
# Usage: trnccl_topo_test.sh TRNCCL_TOPO TRNCCL_RUN ALL_REDUCE_PERF FIXTURES_DIR
set -uo pipefail
topo="$1" run="$2" perf="$3" fixtures="$4"
. "$(dirname "$0")/check_lib.sh"  # tmp, fail, check
unset TRNCCL_TOPO_FILE TRNCCL_TOPO_PRESET TRNCCL_NEURON_DEVICES

"$topo" --preset trn2.48xlarge --dump "$tmp/a.topo" > "$tmp/preset.out"
"$topo" --file "$tmp/a.topo" --dump "$tmp/b.topo" > "$tmp/file.out"
check "a preset's dump loads back identically" cmp "$tmp/a.topo" "$tmp/b.topo"
check "the file prints the same topology as the preset" \
  diff <(tail -n +2 "$tmp/preset.out" | grep -v written) <(tail -n +2 "$tmp/file.out" | grep -v written)

TRNCCL_NEURON_SYSFS="$fixtures/neuron_sysfs/trn2" "$topo" > "$tmp/sysfs.out"
check "the trn2 sysfs fixture is read as a 4x4 torus" \
  grep -q "sysfs.*" "$tmp/sysfs.out"
check "  ... with 32 NeuronLink-v3 links" grep -q "4x4 torus, 32 NeuronLink(s) (neuronlink-v3" "$tmp/sysfs.out"

if "$topo" --preset trn2.48xlarge --ranks-per-node 40 > /dev/null 2> "$tmp/fit.err"; then
  echo "FAILED: 40 ranks per node on a 16-chip preset were accepted"; fail=1
else
  check "a job that does not fit is refused naming the preset and the variable" \
    grep -q "trn2.48xlarge describes 16 Neuron chip(s) per node.*40 local ranks.*TRNCCL_TOPO_PRESET" "$tmp/fit.err"
fi

start=$(date +%s%N)
"$topo" --preset trn2.48xlarge --nodes 64 > "$tmp/big.out"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
check "64 trn2 nodes = 1024 ranks (${ms} ms)" grep -q "1024 rank(s) on 64 node(s)" "$tmp/big.out"

# The plan at scale: 64 and 256 trn2 nodes (1024 and 4096 ranks). The bound is generous (a
# shared 2-core machine); bench/ and docs/PLANNER.md have the real figure.
for nodes in 64 256; do
  start=$(date +%s%N)
  "$topo" --preset trn2.48xlarge --nodes "$nodes" --plan > "$tmp/plan$nodes.out"
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  check "plan for $((nodes * 16)) ranks in ${ms} ms (bound 5000)" test "$ms" -lt 5000
  check "  ... names an algorithm for every collective" \
    test "$(grep -cE '^(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|AllToAll|AllToAllv|Barrier) ' "$tmp/plan$nodes.out")" -ge 8
done
check "small and large all-reduces at 1024 ranks take different algorithms" \
  test "$(grep -c '^AllReduce ' "$tmp/plan64.out")" -ge 2
# With this machine's costs the plan is a job's: more ranks than --cores makes the rooted
# collectives pay for every rank's turn (broadcast and reduce change), and TRNCCL_CMA=0 takes
# the single-copy form away (all-to-all at 2 ranks changes).
"$topo" --ranks-per-node 4 --cores 2 --plan | grep '^TRNCCL_ALGO' > "$tmp/plan-cores2.out"
"$topo" --ranks-per-node 4 --cores 8 --plan | grep '^TRNCCL_ALGO' > "$tmp/plan-cores8.out"
check "4 ranks on 2 cores plan otherwise than on 8" \
  bash -c "! diff -q '$tmp/plan-cores2.out' '$tmp/plan-cores8.out' >/dev/null"
"$topo" --ranks-per-node 2 --plan | grep '^TRNCCL_ALGO' > "$tmp/plan-cma.out"
TRNCCL_CMA=0 "$topo" --ranks-per-node 2 --plan | grep '^TRNCCL_ALGO' > "$tmp/plan-nocma.out"
check "TRNCCL_CMA=0 changes the 2-rank plan" \
  bash -c "! diff -q '$tmp/plan-cma.out' '$tmp/plan-nocma.out' >/dev/null"
if "$topo" --ranks-per-node 2 --cores -1 --plan > /dev/null 2>&1; then
  echo "FAILED: --cores -1 was accepted"; fail=1
fi
# A tuning file that makes efa nearly free and NeuronLink slow moves the choice (an honest
# check that the planner reads it), and a malformed one is refused naming its line.
printf 'trnccl-tuning 1\n# efa as fast as memory, links slow\nlink efa alpha_us=0.1 gbps=10000\nlink neuronlink alpha_us=50 gbps=0.1\n' > "$tmp/fast-efa.tuning"
"$topo" --preset trn2.48xlarge --nodes 2 --plan > "$tmp/plan-default.out"
"$topo" --preset trn2.48xlarge --nodes 2 --plan --tuning "$tmp/fast-efa.tuning" > "$tmp/plan-tuned.out"
check "the tuning file is named as the costs' origin" grep -q "costs: TRNCCL_TUNING_FILE=$tmp/fast-efa.tuning" "$tmp/plan-tuned.out"
check "  ... and changes the plan" bash -c "! diff -q <(grep '^[A-Z]' '$tmp/plan-default.out') <(grep '^[A-Z]' '$tmp/plan-tuned.out') >/dev/null"
printf 'trnccl-tuning 1\nlink efa alpha_us=8 gbps=fast\n' > "$tmp/bad.tuning"
if "$topo" --plan --tuning "$tmp/bad.tuning" > /dev/null 2> "$tmp/bad.err"; then
  echo "FAILED: a malformed tuning file was accepted"; fail=1
else
  check "a malformed tuning file is refused naming the line and the field" \
    grep -q "bad.tuning line 2: gbps='fast' is not a positive number" "$tmp/bad.err"
fi

mkdir "$tmp/traffic"
TRNCCL_TOPO_PRESET=trn2.48xlarge TRNCCL_ALGO=ring TRNCCL_TRAFFIC_DIR="$tmp/traffic" \
  TRNCCL_TOPO_DUMP_FILE="$tmp/job-dump.%h.topo" \
  "$run" -np 4 "$perf" -b 1M -e 1M -n 2 -w 1 -c 1 > "$tmp/job.out" 2>&1
check "the job ran and checked its results" grep -q "Out of bounds values : 0 OK" "$tmp/job.out"
dump=$(ls "$tmp"/job-dump.*.topo 2>/dev/null | head -1)
check "the job's TRNCCL_TOPO_DUMP_FILE was written" test -n "$dump"
check "  ... and holds the preset's graph" diff <(grep -v '^#' "$dump") "$tmp/a.topo"
"$topo" --stats "$tmp/traffic" > "$tmp/stats.out"
cat "$tmp/stats.out"
# Ranks 0-3 drive chips 0-3, the first row of the torus: linked 0-1, 1-2, 2-3 and 0-3.
check "NeuronLink carried traffic" grep -q "^neuronlink" "$tmp/stats.out"
bad=$(awk '$1 == "neuronlink" && ($2 " " $3) !~ /node0 chip(0-chip1|1-chip2|2-chip3|0-chip3)$/' "$tmp/stats.out")
check "only between linked chips" test -z "$bad"

exit $fail
