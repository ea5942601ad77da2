#!/usr/bin/env bash
# Two real "hosts" on one machine: network namespaces A and B joined by a veth pair that this
# test creates and removes. Ranks 0-1 run in A, ranks 2-3 in B (different host ids, so shm
# inside each namespace and the efa transport across the veth, over libfabric's tcp;ofi_rxm
# and, for some jobs, net);
# the bootstrap root listens on A's veth address. The job runs on a clean link, then with 1% of
# B's incoming TCP packets dropped (nftables) and A's egress rate-limited (tc tbf): results
# must stay bit-exact (-c 1 checks against the serial reference) and the jobs must finish. A
# third job runs with every TCP connection between the namespaces through a relay that delays
# each byte by 2 ms each way (tests/netns_relay.py).
# Usage: netns_test.sh BUILD_DIR. Exit 77 (skipped) where namespaces cannot be created.
set -u
build="${1:?usage: netns_test.sh BUILD_DIR}"
bin="$build/bench"

netns_label=netns
source "$(dirname "$0")/netns_lib.sh"
[ -x "$bin/trnccl-run" ] || { echo "netns: $bin/trnccl-run is not built"; exit 1; }
netns_setup

failures=0
# Both ways over TCP: tcp under ofi_rxm, and net (the provider's own reliable datagrams, what
# trnccl picks by default). run_job uses $provider.
provider="tcp;ofi_rxm"
# One 4-rank job per tool: 2 ranks per namespace, each namespace its own node.
run_job() {
  local label="$1" tool="$2"
  shift 2
  netns_run_job 2 2 TRNCCL_TIMEOUT=120 TRNCCL_FI_PROVIDER="$provider" -- "$bin/$tool" "$@"
  if [ "$rcA" -eq 0 ] && [ "$rcB" -eq 0 ] && grep -q "Out of bounds values : 0 OK" "$tmp/a.out"; then
    echo "netns: ok   $provider, $label $tool ($(grep -c '^ *[0-9]' "$tmp/a.out") sizes, #wrong 0)"
  else
    echo "netns: FAIL $provider, $label $tool (exit $rcA / $rcB)"
    sed 's/^/  A: /' "$tmp/a.out" | tail -20
    sed 's/^/  B: /' "$tmp/b.out" | tail -20
    failures=$((failures + 1))
  fi
}

sizes=(-b 8 -e 8M -f 8 -c 1 -n 3 -w 1)
for tool in all_reduce_perf alltoall_perf broadcast_perf; do
  run_job "clean link" "$tool" "${sizes[@]}"
done
# Messages of several fragments (eager from 512 KiB, rendezvous reads from 1 MiB), striped over
# every rail: each rail must reach the other host (a rail on lo once swallowed them).
run_job "clean link, several fragments" sendrecv_perf -b 600K -e 2400K -f 2 -c 1 -n 3 -w 1
provider=net
run_job "clean link" all_reduce_perf "${sizes[@]}"
run_job "clean link, several fragments" sendrecv_perf -b 600K -e 2400K -f 2 -c 1 -n 3 -w 1
provider="tcp;ofi_rxm"

# A slow link: in each namespace an nftables rule redirects TCP connections to the other
# namespace onto a relay (tests/netns_relay.py) that delays every byte 2 ms each way. Needs
# nftables NAT and python3; without them this part is reported and left out.
if netns_start_relay "$nsA" "$ipB" "$tmp/relayA.log" 2 &&
    netns_start_relay "$nsB" "$ipA" "$tmp/relayB.log" 2; then
  netns_wait_relays "$tmp/relayA.log" "$tmp/relayB.log"
  run_job "2 ms relay each way" all_reduce_perf -b 8 -e 1M -f 8 -c 1 -n 3 -w 1
  small_us="$(awk '$1 == 8 {print $6; exit}' "$tmp/a.out")"
  echo "netns: 8-byte all-reduce over the delayed link (us): $small_us"
  netns_stop_relays
  # Which side's connection the provider keeps when both connect at once is a race, and one
  # connection carries both directions: the relays must carry the job between them.
  relayed=0
  for side in A B; do
    echo "netns: relay in $side: $(grep '^relay: [0-9]' "$tmp/relay$side.log")"
    bytes="$(netns_relayed_bytes "$tmp/relay$side.log")"
    relayed=$((relayed + ${bytes:-0}))
  done
  if [ "$relayed" -lt 100000 ]; then
    echo "netns: FAIL the relays carried almost nothing ($relayed bytes): the delay was not applied"
    tail -5 "$tmp/relayA.log" "$tmp/relayB.log" | sed 's/^/  relay: /'
    failures=$((failures + 1))
  fi
  # Every all-reduce needs at least one message across the link: 2 ms at the least.
  if ! awk -v t="${small_us:-0}" 'BEGIN { exit !(t >= 2000) }'; then
    echo "netns: FAIL an 8-byte all-reduce took ${small_us:-?} us over a link delayed 2 ms each way"
    failures=$((failures + 1))
  fi
else
  echo "netns: note: no nftables NAT or python3 here: the delayed-link job is left out"
fi

# Faults on the link: 1% of B's incoming TCP segments dropped, A's egress limited to 200 Mbit/s.
if command -v nft >/dev/null; then
  netns_drop_tcp "$nsB" 1 || { echo "netns: FAIL cannot install the nftables rule"; exit 1; }
  loss="1% loss"
else
  echo "netns: note: nft (Debian package nftables) is missing: no packet loss, rate limit only"
  loss="no loss (nft missing)"
fi
ip netns exec "$nsA" tc qdisc add dev "$vethA" root tbf rate 200mbit burst 64kb latency 100ms ||
  { echo "netns: FAIL cannot add the tbf qdisc"; exit 1; }
for tool in all_reduce_perf alltoall_perf; do
  run_job "$loss + 200 Mbit/s" "$tool" "${sizes[@]}"
done
provider=net run_job "$loss + 200 Mbit/s" all_reduce_perf "${sizes[@]}"
# The faults must have happened, and the traffic must have crossed the veth pair.
if command -v nft >/dev/null; then
  dropped="$(netns_dropped "$nsB")"
  echo "netns: TCP segments dropped on the way into $nsB: ${dropped:-?}"
  if [ "${dropped:-0}" -eq 0 ]; then
    echo "netns: FAIL the loss rule dropped nothing"
    failures=$((failures + 1))
  fi
fi
txA="$(ip -n "$nsA" -s link show "$vethA" | awk '/TX:/{getline; print $1}')"
echo "netns: bytes sent by $nsA over $vethA: $txA"
if [ "${txA:-0}" -lt 10000000 ]; then
  echo "netns: FAIL less than 10 MB crossed the veth: the ranks did not talk over it"
  failures=$((failures + 1))
fi

[ "$failures" -eq 0 ] && echo "netns: all jobs finished with bit-exact results"
exit $((failures > 0))
