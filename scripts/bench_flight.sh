#!/usr/bin/env bash
# What the flight recorder costs: all_reduce_perf on 2 ranks (8 B to 512 KiB) with the recorder
# on (the default, 256 entries) and off (TRNCCL_FLIGHT_RECORDER_ENTRIES=0), alternating run by
# run, ROUNDS runs each. Writes build/bench-results/flight/summary.md (report.py includes it).
#   bash scripts/bench_flight.sh [--rounds R] [--quick]
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=3
iters=(-n 2000 -w 200 -R 3)
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --quick) rounds=1; iters=(-n 100 -w 10 -R 1); shift ;;
    -h|--help) sed -n 2,5p "$0"; exit 0 ;;
    *) echo "bench_flight: unknown argument $1 (see --help)"; exit 2 ;;
  esac
done
BIN=build/bench
[ -x "$BIN/all_reduce_perf" ] || { echo "bench_flight: build first (bash scripts/build.sh build)"; exit 1; }
out=build/bench-results/flight
rm -rf "$out" && mkdir -p "$out" || exit 1
failures=0
for round in $(seq 1 "$rounds"); do
  for setting in on off; do
    entries=256
    [ "$setting" = off ] && entries=0
    cmd=("$BIN/trnccl-run" -np 2 "$BIN/all_reduce_perf" -b 8 -e 512K -f 16 -c 0 "${iters[@]}"
         -J "$out/${setting}.jsonl")
    echo "+ TRNCCL_FLIGHT_RECORDER_ENTRIES=$entries ${cmd[*]}" >>"$out/commands.txt"
    TRNCCL_FLIGHT_RECORDER_ENTRIES=$entries timeout -k 10 600 "${cmd[@]}" \
      >>"$out/${setting}.txt" 2>&1 ||
      { echo "bench_flight: $setting round $round failed"; failures=$((failures + 1)); }
  done
done
python3 - "$out" "$rounds" >"$out/summary.md" <<'PY'
import json, statistics, sys, datetime, os
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for setting in ("on", "off"):
    for line in open(os.path.join(out, setting + ".jsonl")):
        r = json.loads(line)
        if r.get("impl") != "trnccl" or r.get("placement") != "out":
            continue
        rows.setdefault(r["size"], {}).setdefault(setting, []).append(r["time_us"])
print(f"`bash scripts/bench_flight.sh`: {rounds} runs per setting of `trnccl-run -np 2 "
      "all_reduce_perf -b 8 -e 512K -f 16 -c 0 -n 2000 -w 200 -R 3`, alternating recorder on "
      f"(default) and off (`TRNCCL_FLIGHT_RECORDER_ENTRIES=0`), on "
      f"{datetime.date.today()}, {os.cpu_count()} cores. Times are each run's median of 3 "
      "repeats (out of place, max over ranks); the ratio is on / off of the medians over runs.")
print()
print("| bytes | on: us (runs) | off: us (runs) | on / off |")
print("|---:|---|---|---:|")
for size in sorted(rows):
    on, off = rows[size].get("on", []), rows[size].get("off", [])
    if not on or not off:
        continue
    ratio = statistics.median(on) / statistics.median(off)
    fmt = lambda v: ", ".join(f"{x:.2f}" for x in v)
    print(f"| {size} | {fmt(on)} | {fmt(off)} | {ratio:.3f} |")
PY
cat "$out/summary.md"
[ "$failures" -eq 0 ]
