#!/usr/bin/env bash
# The fault matrix's "loss + delay" row: a 3-rank job across two network namespaces (ranks 0
# and 1 in A, rank 2 in B) whose link drops 1% of the TCP segments each side receives
# (nftables) and delays every byte 2 ms each way (a relay behind an nftables redirect,
# tests/netns_relay.py). Nobody dies: init, a 16 MiB all-reduce and a 16 MiB exchange between
# rank 0 and rank 2 must all succeed with exact results (tests/faulty_link_job.cpp), over the
# three layouts of tests/fault_matrix_test.cpp: every peer over efa with libfabric's net
# provider, with tcp;ofi_rxm, and the 2-node layout (shm inside A, efa net to B).
# With TRNCCL_FAULT_MATRIX_OUT set, every rank's JSON line per phase is appended there
# (scripts/fault_matrix.sh renders docs/RELIABILITY.md's table from it).
# Usage: faulty_link_test.sh BUILD_DIR. Exit 77 (skipped) where namespaces cannot be made.
set -u
build="${1:?usage: faulty_link_test.sh BUILD_DIR}"
bin="$build/bench"
job="$build/tests/faulty_link_job"
netns_label=faulty_link
source "$(dirname "$0")/netns_lib.sh"
for tool in "$bin/trnccl-run" "$job"; do
  [ -x "$tool" ] || { echo "faulty_link: $tool is not built"; exit 1; }
done
command -v nft >/dev/null || netns_skip "nft (Debian package nftables) is not installed"
command -v python3 >/dev/null || netns_skip "python3 is not installed (the delaying relay)"
netns_setup

netns_start_relay "$nsA" "$ipB" "$tmp/relayA.log" 2 &&
  netns_start_relay "$nsB" "$ipA" "$tmp/relayB.log" 2 ||
  { echo "faulty_link: FAIL cannot start the delaying relays (nftables NAT)"; exit 1; }
netns_wait_relays "$tmp/relayA.log" "$tmp/relayB.log" ||
  { echo "faulty_link: FAIL the relays did not start"; cat "$tmp"/relay*.log; exit 1; }
for ns in "$nsA" "$nsB"; do
  netns_drop_tcp "$ns" 1 || { echo "faulty_link: FAIL cannot install the loss rule"; exit 1; }
done

failures=0
# Loss must cost time, never an error: the timeout is far above what the job needs (a few
# seconds), unlike the dead-peer cells' 2 s.
timeout_s=60
run_layout() {
  local layout="$1" provider="$2" transport="$3"
  local settings=(TRNCCL_TIMEOUT=$timeout_s TRNCCL_FI_PROVIDER="$provider")
  [ -n "$transport" ] && settings+=(TRNCCL_TRANSPORT="$transport")
  local start=$SECONDS
  netns_run_job 2 1 "${settings[@]}" -- "$job" --layout "$layout"
  cat "$tmp/a.out" "$tmp/b.out" | grep '^{' >"$tmp/rows"
  [ -n "${TRNCCL_FAULT_MATRIX_OUT:-}" ] && cat "$tmp/rows" >>"$TRNCCL_FAULT_MATRIX_OUT"
  # 3 ranks x (init + collective) + 2 ranks x p2p, every one a success.
  local good bad
  good="$(grep -c '"result":"\(no error\|exact\)"' "$tmp/rows")"
  bad="$(grep -vc '"result":"\(no error\|exact\)"' "$tmp/rows")"
  local slowest
  slowest="$(sed -n 's/.*"seconds":\([0-9.]*\).*/\1/p' "$tmp/rows" | sort -n | tail -1)"
  if [ "$rcA" -eq 0 ] && [ "$rcB" -eq 0 ] && [ "$good" -eq 8 ] && [ "$bad" -eq 0 ]; then
    echo "faulty_link: ok   $layout ($provider): 8 of 8 phases exact, slowest ${slowest:-?} s," \
      "job $((SECONDS - start)) s"
  else
    echo "faulty_link: FAIL $layout ($provider): exit $rcA / $rcB, $good phases exact, $bad not"
    sed 's/^/  /' "$tmp/rows"
    grep -v '^{' "$tmp/a.out" | tail -5 | sed 's/^/  A: /'
    grep -v '^{' "$tmp/b.out" | tail -5 | sed 's/^/  B: /'
    failures=$((failures + 1))
  fi
}

run_layout net net efa
run_layout tcp "tcp;ofi_rxm" efa
run_layout nodes net ""

# The faults must have happened: segments dropped on both sides, bytes through both relays.
dropped=0
for ns in "$nsA" "$nsB"; do dropped=$((dropped + $(netns_dropped "$ns"))); done
netns_stop_relays
relayed=0
for side in A B; do relayed=$((relayed + $(netns_relayed_bytes "$tmp/relay$side.log"))); done
echo "faulty_link: $dropped TCP segments dropped, $relayed bytes through the 2 ms relays"
if [ "$dropped" -eq 0 ] || [ "$relayed" -lt 10000000 ]; then
  echo "faulty_link: FAIL the link was not faulty (dropped $dropped, relayed $relayed bytes)"
  failures=$((failures + 1))
fi
[ "$failures" -eq 0 ] && echo "faulty_link: every phase exact over a lossy, delayed link"
exit $((failures > 0))
