#!/usr/bin/env bash
# planner_replay.py on a measured table: every size is judged with this machine's defaults, with
# a tuning file, and with the table's own files per layout; a table it cannot read, or a plan
# it cannot parse, fails.
# usage: test_replay.sh TRNCCL_TOPO TABLE.md
set -euo pipefail
topo="$1" table="$2"
here="$(cd "$(dirname "$0")" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$(/usr/bin/python3 "$here/planner_replay.py" --topo "$topo" "$table")
echo "$out"
echo "$out" | grep -Eq "^all: [0-9]+ of 117 sizes within 10%$"
printf 'trnccl-tuning 1\nsync_us 0.4\n' >"$tmp/sync.tuning"
/usr/bin/python3 "$here/planner_replay.py" --topo "$topo" --tuning "$tmp/sync.tuning" --verbose \
  "$table" | tee "$tmp/tuned.out"
grep -Eq "^all: [0-9]+ of 117 sizes within 10%$" "$tmp/tuned.out"
# --own-tuning: each layout with the table's own file beside it (bench_planner.sh --tune);
# with the same file for every layout it must judge as --tuning does.
cp "$table" "$tmp/run.md"
for layout in 2 4 2x2; do cp "$tmp/sync.tuning" "$tmp/run.tuning-$layout"; done
own=$(/usr/bin/python3 "$here/planner_replay.py" --topo "$topo" --own-tuning "$tmp/run.md" | tail -1)
echo "own files: $own"
[ "$own" = "$(tail -1 "$tmp/tuned.out")" ] || { echo "FAILED: --own-tuning judged otherwise"; exit 1; }
# ... and a table without files is left out (nothing judged: exit status 1).
if /usr/bin/python3 "$here/planner_replay.py" --topo "$topo" --own-tuning "$table"; then
  echo "FAILED: a table without its own files was judged"
  exit 1
fi
# A table without any layout it knows judges nothing: exit status 1.
printf '# nothing\n' >"$tmp/empty.md"
if /usr/bin/python3 "$here/planner_replay.py" --topo "$topo" "$tmp/empty.md"; then
  echo "FAILED: an empty table was accepted"
  exit 1
fi
echo "ok"
