#!/usr/bin/env python3
"""A TCP relay that adds a fixed delay to every byte in both directions.

netns_test.sh runs one inside each network namespace: an nftables rule there redirects the
namespace's outgoing TCP connections to the other namespace's address onto this relay, which
finds the original destination (SO_ORIGINAL_DST), connects to it with a socket mark the rule
lets through, and forwards each chunk `--delay-ms` after it arrived, in order. The kernel here
has no netem; this is how the test gets a slow wide-area-like link. Prints one summary line on
SIGTERM: connections and bytes relayed.
"""
import argparse
import collections
import signal
import socket
import struct
import sys
import threading
import time

SO_ORIGINAL_DST = 80

stats = {"connections": 0, "bytes": 0}
stats_lock = threading.Lock()


def pump(src, dst, delay):
    """Reads from src and writes to dst, each chunk `delay` seconds after it was read."""
    queue = collections.deque()
    ready = threading.Condition()
    done = [False]

    def writer():
        while True:
            with ready:
                while not queue and not done[0]:
                    ready.wait()
                if not queue:
                    break
                due, chunk = queue.popleft()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                dst.sendall(chunk)
            except OSError:
                break
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    while True:
        try:
            chunk = src.recv(1 << 16)
        except OSError:
            chunk = b""
        with ready:
            if not chunk:
                done[0] = True
                ready.notify()
                break
            queue.append((time.monotonic() + delay, chunk))
            ready.notify()
        with stats_lock:
            stats["bytes"] += len(chunk)
    thread.join()


def serve(client, delay, mark):
    raw = client.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, packed = struct.unpack_from("!2xH4s", raw)
    target = (socket.inet_ntoa(packed), port)
    upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    upstream.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, mark)
    try:
        upstream.connect(target)
    except OSError as error:
        print(f"relay: cannot reach {target}: {error}", file=sys.stderr, flush=True)
        client.close()
        return
    for s in (client, upstream):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with stats_lock:
        stats["connections"] += 1
    back = threading.Thread(target=pump, args=(upstream, client, delay), daemon=True)
    back.start()
    pump(client, upstream, delay)
    back.join()
    client.close()
    upstream.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, required=True)
    parser.add_argument("--mark", type=int, default=1)
    args = parser.parse_args()

    def report(*_):
        with stats_lock:
            print(f"relay: {stats['connections']} connections, {stats['bytes']} bytes, "
                  f"{args.delay_ms} ms each way", flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, report)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", args.port))
    listener.listen(128)
    print("relay: listening", flush=True)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=serve, args=(client, args.delay_ms / 1000.0, args.mark),
                         daemon=True).start()


if __name__ == "__main__":
    main()
