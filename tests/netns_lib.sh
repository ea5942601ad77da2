# Two real "hosts" on one machine, for the tests that need a network between ranks
# (netns_test.sh, faulty_link_test.sh): network namespaces A and B joined by a veth pair that
# netns_setup creates and an exit trap removes, a relay that delays every byte (netns_relay.py,
# behind an nftables redirect: this kernel has no netem), and an nftables rule that drops a
# share of a namespace's incoming TCP segments. Source it after setting netns_label (the prefix
# of every line printed) and bin (the directory holding trnccl-run); the caller's own cleanup
# goes in netns_cleanup_extra.

netns_skip() {
  echo "$netns_label: SKIP: $*"
  exit 77
}

# Sets nsA, nsB, vethA, vethB, ipA, ipB and tmp (a scratch directory removed at exit).
netns_setup() {
  [ "$(id -u)" -eq 0 ] || netns_skip "creating network namespaces needs root"
  command -v ip >/dev/null || netns_skip "ip (iproute2) is not installed"
  local id=$$
  nsA="trnccl-a-$id"
  nsB="trnccl-b-$id"
  vethA="tva$id"
  vethB="tvb$id"
  local net="10.251.$((id % 250)).0"
  ipA="${net%.0}.1"
  ipB="${net%.0}.2"
  tmp="$(mktemp -d)"
  relays=()
  trap netns_cleanup EXIT
  ip netns add "$nsA" 2>/dev/null || netns_skip "this machine forbids 'ip netns add'"
  ip netns add "$nsB" || exit 1
  ip link add "$vethA" type veth peer name "$vethB" 2>/dev/null ||
    netns_skip "veth pairs are not allowed"
  ip link set "$vethA" netns "$nsA" && ip link set "$vethB" netns "$nsB" || exit 1
  ip -n "$nsA" addr add "$ipA/24" dev "$vethA" && ip -n "$nsB" addr add "$ipB/24" dev "$vethB" ||
    exit 1
  local ns
  for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
  ip -n "$nsA" link set "$vethA" up && ip -n "$nsB" link set "$vethB" up || exit 1
  echo "$netns_label: $nsA ($ipA on $vethA) <-> $nsB ($ipB on $vethB)"
}

netns_cleanup() {
  declare -F netns_cleanup_extra >/dev/null && netns_cleanup_extra
  [ "${#relays[@]}" -gt 0 ] && kill -TERM "${relays[@]}" 2>/dev/null
  ip netns del "$nsA" 2>/dev/null
  ip netns del "$nsB" 2>/dev/null  # deleting a namespace deletes its end of the veth pair
  rm -rf "$tmp"
}

# One job across the namespaces, each its own host: $1 ranks in A (the first ones, with the
# bootstrap root on A's address), $2 ranks in B after them. Then VAR=value settings for both
# sides, "--", and the command each side's trnccl-run starts. Output (stdout and stderr) goes
# to $tmp/a.out and $tmp/b.out; sets rcA and rcB to the launchers' exit codes.
netns_run_job() {
  local npA="$1" npB="$2"
  shift 2
  local settings=()
  while [ "$1" != "--" ]; do
    settings+=("$1")
    shift
  done
  shift
  rm -f "$tmp/id"
  local ranks=$((npA + npB))
  ip netns exec "$nsA" env "${settings[@]}" TRNCCL_BOOTSTRAP_ADDR="$ipA" FI_TCP_IFACE="$vethA" \
    FI_NET_IFACE="$vethA" TRNCCL_HOSTID=host-a timeout -k 5 300 "$bin/trnccl-run" -np "$npA" \
    --nranks "$ranks" --first-rank 0 --id-file "$tmp/id" "$@" >"$tmp/a.out" 2>&1 &
  local pidA=$!
  ip netns exec "$nsB" env "${settings[@]}" FI_TCP_IFACE="$vethB" FI_NET_IFACE="$vethB" \
    TRNCCL_HOSTID=host-b timeout -k 5 300 "$bin/trnccl-run" -np "$npB" --nranks "$ranks" \
    --first-rank "$npA" --id-file "$tmp/id" "$@" >"$tmp/b.out" 2>&1 &
  local pidB=$!
  wait "$pidA"
  rcA=$?
  wait "$pidB"
  rcB=$?
}

relay_port=7390
# In namespace $1, redirects TCP connections to address $2 onto a relay that delays every byte
# $4 ms, logging to $3. Needs nftables NAT and python3; returns 1 without them.
netns_start_relay() {
  command -v nft >/dev/null && command -v python3 >/dev/null || return 1
  ip netns exec "$1" nft -f - <<EOF || return 1
table ip trnccl_delay {
  chain output {
    type nat hook output priority -100;
    meta mark 0x1 return
    ip daddr $2 meta l4proto tcp counter redirect to :$relay_port
  }
}
EOF
  ip netns exec "$1" python3 "$(dirname "${BASH_SOURCE[0]}")/netns_relay.py" \
    --port "$relay_port" --delay-ms "$4" --mark 1 >"$3" 2>&1 &
  relays+=($!)
}

# Waits (up to 5 s) until every relay log given says it listens.
netns_wait_relays() {
  local _ log ready
  for _ in $(seq 50); do
    ready=1
    for log in "$@"; do grep -q listening "$log" || ready=0; done
    [ "$ready" -eq 1 ] && return 0
    sleep 0.1
  done
  return 1
}

# Stops the relays (each prints its summary line into its log) and removes the redirects.
netns_stop_relays() {
  [ "${#relays[@]}" -gt 0 ] || return 0
  kill -TERM "${relays[@]}" 2>/dev/null
  wait "${relays[@]}" 2>/dev/null
  relays=()
  ip netns exec "$nsA" nft delete table ip trnccl_delay 2>/dev/null
  ip netns exec "$nsB" nft delete table ip trnccl_delay 2>/dev/null
  return 0
}

# Bytes a relay carried, from the summary line in its log ($1).
netns_relayed_bytes() {
  local summary
  summary="$(grep '^relay: [0-9]' "$1")"
  echo "$summary" | sed -n 's/.* \([0-9]*\) bytes.*/\1/p'
}

# Drops $2 percent of the TCP segments namespace $1 receives (nftables table trnccl_loss).
netns_drop_tcp() {
  ip netns exec "$1" nft -f - <<EOF
table inet trnccl_loss {
  chain input {
    type filter hook input priority 0;
    meta l4proto tcp numgen random mod 100 < $2 counter drop
  }
}
EOF
}

# How many segments namespace $1's loss rule dropped so far.
netns_dropped() {
  ip netns exec "$1" nft list table inet trnccl_loss |
    sed -n 's/.*counter packets \([0-9]*\).*/\1/p'
}
