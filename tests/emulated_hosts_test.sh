#!/usr/bin/env bash
# A 4-rank job on 2 emulated hosts as Open MPI launches it (scripts/emulated_node_ssh.sh: each
# "host" in its own UTS namespace with its own host name, no TRNCCL_HOSTID): trnccl must find
# 2 nodes by their names (shm inside, efa between), give exact results, and -- on a machine
# with fewer than 4 cores -- count the 4 ranks as sharing this machine's cores (they share the
# kernel), so that its waits yield instead of spinning.
# Usage: emulated_hosts_test.sh BUILD_DIR SOURCE_DIR. Exit 77 (skipped) where the UTS namespace
# cannot be made (not root) or mpirun is missing.
set -u
build="${1:?usage: emulated_hosts_test.sh BUILD_DIR SOURCE_DIR}"
source_dir="${2:?usage: emulated_hosts_test.sh BUILD_DIR SOURCE_DIR}"
command -v mpirun >/dev/null || { echo "emulated_hosts: no mpirun; skipped"; exit 77; }
unshare --uts true 2>/dev/null || { echo "emulated_hosts: no UTS namespace (needs root); skipped"; exit 77; }
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
failures=0
mpirun=(mpirun --allow-run-as-root --host nodea:2,nodeb:2 -np 4 --bind-to none
        --mca mpi_yield_when_idle 1 --mca plm_rsh_agent "$source_dir/scripts/emulated_node_ssh.sh"
        --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo --mca pml ob1
        --mca btl self,vader,tcp -x TRNCCL_DEBUG=INFO -x TRNCCL_TIMEOUT=120
        -x FI_TCP_IFACE=lo -x FI_NET_IFACE=lo)
# Under AddressSanitizer the ranks are MPI programs: Open MPI's plugins (unloaded at exit, so
# their frames read "<unknown module>") and libfabric's net provider leak at exit. Leak checking
# is off here; the other multi-rank tests check trnccl's own (without MPI), memory errors are
# still checked here.
# (Without AddressSanitizer the variable is ignored.)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
mpirun+=(-x ASAN_OPTIONS)
for tool in all_reduce_perf alltoall_perf; do
  if timeout -k 10 300 "${mpirun[@]}" "$build/bench/$tool" -b 8 -e 1M -f 8 -c 1 -n 3 -w 1 \
      >"$out" 2>&1 && grep -q "Out of bounds values : 0 OK" "$out"; then
    echo "emulated_hosts: ok   $tool, exact results"
  else
    echo "emulated_hosts: FAIL $tool"; tail -30 "$out"; failures=$((failures + 1)); continue
  fi
  init_lines="$(grep -c 'trnccl INFO comm rank [0-3]/4: 2 node(s), local rank [01] of 2' "$out")"
  hosts="$(grep -o 'trnccl INFO comm rank [0-3]/4: .* on node[ab];' "$out" | grep -o 'on node[ab]' | sort | uniq -c | tr -s ' ')"
  if [ "$init_lines" -eq 4 ] && [ "$(grep -c 'efa for 2' "$out")" -ge 4 ] &&
      [ "$hosts" = " 2 on nodea
 2 on nodeb" ]; then
    echo "emulated_hosts: ok   $tool, 2 nodes of 2 ranks by host name, efa between"
  else
    echo "emulated_hosts: FAIL $tool, layout ($init_lines init lines; hosts: $hosts)"
    grep "trnccl INFO comm rank" "$out" | head -8; failures=$((failures + 1))
  fi
  if [ "$(nproc)" -lt 4 ]; then
    if [ "$(grep -c 'trnccl INFO comm rank [0-3]/4: .*; spin 0 passes' "$out")" -eq 4 ]; then
      echo "emulated_hosts: ok   $tool, 4 ranks on $(nproc) cores counted as oversubscribed"
    else
      echo "emulated_hosts: FAIL $tool, 4 ranks on $(nproc) cores not counted as oversubscribed"
      grep "trnccl INFO comm rank [0-3]/4" "$out" | head -4; failures=$((failures + 1))
    fi
  fi
done
[ "$failures" -eq 0 ]
