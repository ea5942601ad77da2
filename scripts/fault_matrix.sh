#!/usr/bin/env bash
# The fault matrix (tests/fault_matrix_test.cpp): rank 1 of 3 killed, stalled or aborting, at
# init, mid-collective and mid-point-to-point, over efa (net, tcp;ofi_rxm) and the emulated
# 2-node layout; then the loss + delay row (tests/faulty_link_test.sh: the same layouts across
# two network namespaces whose link drops 1% of TCP segments and delays every byte 2 ms; needs
# root and nftables, else that row is left out and said so). Runs both with
# TRNCCL_FAULT_MATRIX_OUT and writes the table of what every rank got (result, seconds,
# sentence) into docs/RELIABILITY.md between its markers.
#   bash scripts/fault_matrix.sh
set -uo pipefail
cd "$(dirname "$0")/.."
[ -x build/tests/fault_matrix_test ] || { echo "fault_matrix: build first (bash scripts/build.sh build)"; exit 1; }
out=build/bench-results/fault-matrix
rm -rf "$out" && mkdir -p "$out" || exit 1
TRNCCL_FAULT_MATRIX_OUT="$out/cells.jsonl" timeout -k 10 900 build/tests/fault_matrix_test \
  >"$out/test.log" 2>&1
status=$?
TRNCCL_FAULT_MATRIX_OUT="$out/cells.jsonl" timeout -k 10 900 bash tests/faulty_link_test.sh build \
  >"$out/link.log" 2>&1
link=$?
tail -1 "$out/link.log"
[ "$link" -eq 0 ] || [ "$link" -eq 77 ] || status=1
python3 - "$out/cells.jsonl" docs/RELIABILITY.md "$status" "$link" <<'PY'
import json, sys, datetime, os
cells_path, doc_path, status, link = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = [json.loads(l) for l in open(cells_path)] if os.path.exists(cells_path) else []
order = {"net": 0, "tcp": 1, "nodes": 2, "kill": 0, "stall": 1, "abort": 2, "loss+delay": 3,
         "init": 0, "collective": 1, "p2p": 2}
rows.sort(key=lambda r: (order[r["layout"]], order[r["fault"]], order[r["phase"]], r["rank"]))
names = {"net": "efa, net", "tcp": "efa, tcp;ofi_rxm", "nodes": "2 nodes (shm + efa net)"}
lines = [f"`bash scripts/fault_matrix.sh` on {datetime.date.today()} ({os.cpu_count()} cores; "
         f"TRNCCL_TIMEOUT=2; the test {'passed' if status == 0 else 'FAILED'}). Rank 1 of 3 is "
         "the faulty one; one row per survivor. \"init\" kills rank 1 2 ms into init, stalls it "
         "past the timeout before init, or aborts it right after init (the survivors' first "
         "all-reduce then fails); \"collective\" is a 16 MiB all-reduce, \"p2p\" a 16 MiB send "
         "from rank 0 to rank 1 (rank 2 takes no part). \"loss+delay\" kills nobody: ranks 0 "
         "and 1 in one network namespace, rank 2 in another, the link between them dropping 1% "
         "of the TCP segments each side receives and delaying every byte 2 ms each way, "
         "TRNCCL_TIMEOUT=60; init, three 16 MiB all-reduces checked against the serial sum, and "
         "16 MiB from rank 0 to rank 2 and back; one row per rank (\"no error\" and \"exact\" "
         "are what it must say)" + ("" if link == 0 else
         " -- NOT RUN in this run (the test was skipped: no root or no nftables)"
         if link == 77 else " -- FAILED in this run") + ". The sentence is cut at 160 characters.",
         "", "| transport | fault | phase | rank | result | seconds | what it says |",
         "|---|---|---|---:|---|---:|---|"]
for r in rows:
    msg = r["message"].replace("|", "\\|")
    if len(msg) > 160:
        msg = msg[:157] + "..."
    lines.append(f"| {names[r['layout']]} | {r['fault']} | {r['phase']} | {r['rank']} | "
                 f"{r['result']} | {r['seconds']:.2f} | {msg} |")
text = open(doc_path).read()
begin, end = "<!-- fault-matrix:begin -->", "<!-- fault-matrix:end -->"
if begin not in text:
    raise SystemExit(f"{doc_path} has no {begin} marker")
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open(doc_path, "w").write(head + begin + "\n" + "\n".join(lines) + "\n" + end + tail)
print(f"fault_matrix: {len(rows)} survivor rows written into {doc_path}")
PY
exit "$status"
