# The end-to-end test scripts' shared frame (trnccl_topo_test.sh, trnccl_tune_test.sh,
# perf_algos_test.sh): a scratch directory $tmp removed at exit, and check "what" command...,
# which prints ok or FAILED for each step and sets fail=1 on a failure, so that a script runs
# every step and ends with [ "$fail" -eq 0 ]. Source it after set -uo pipefail.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {
  local what="$1"
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fail=1; fi
}
