#!/usr/bin/env bash
# Checks bench/plot: plot.py and report.py on the hand-written fixture (fixture.jsonl and a tiny
# Google Benchmark file made here) write the PNGs and the tables with the expected rows, and
# fail cleanly on bad input. Exit 77 (meson: skipped) without Debian's python3-matplotlib.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
PY=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
if ! "$PY" -c 'import matplotlib' 2>/dev/null; then
  echo "SKIP: $PY has no matplotlib (apt-get install python3-matplotlib)"
  exit 77
fi
tmp="$(mktemp -d)"
trap 'rm -rf -- "$tmp"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
expect_line() {  # file, exact line
  grep -qxF -- "$2" "$1" || fail "$(basename "$1") lacks the line: $2"
}

# --- a results directory like scripts/bench.sh's ---------------------------------------------
res="$tmp/results"
mkdir -p "$res/micro"
cp "$here/fixture.jsonl" "$res/fixture.jsonl"
echo "not json" >>"$res/fixture.jsonl"                      # skipped with a warning
echo '{"tool":"all_reduce","size":8}' >>"$res/fixture.jsonl"  # incomplete: skipped
echo "mpirun -np 2 build/bench/all_reduce_perf -b 8 -e 64M -R 3 -J fixture.jsonl" \
  >"$res/commands.txt"
printf 'started: 2000-01-01 00:00 UTC\nmode: fixture\ntrnccl: 0000000\n' >"$res/run-info.txt"
cat >"$res/micro/kernels_bench.json" <<'EOF'
{"context": {"num_cpus": 2}, "benchmarks": [
 {"name": "BM_Memcpy/65536_median", "run_name": "BM_Memcpy/65536", "run_type": "aggregate",
  "aggregate_name": "median", "repetitions": 5, "real_time": 1000.0, "time_unit": "ns",
  "bytes_per_second": 100000000000.0},
 {"name": "BM_Memcpy/65536_mean", "run_name": "BM_Memcpy/65536", "run_type": "aggregate",
  "aggregate_name": "mean", "repetitions": 5, "real_time": 9999.0, "time_unit": "ns",
  "bytes_per_second": 1.0},
 {"name": "BM_ReduceFloatSum/65536_median", "run_name": "BM_ReduceFloatSum/65536",
  "run_type": "aggregate", "aggregate_name": "median", "repetitions": 5, "real_time": 2000.0,
  "time_unit": "ns", "bytes_per_second": 150000000000.0}
]}
EOF

# the efa part: fabric_pingpong's console table and all-reduces beside MPI (trnccl over net and
# over tcp;ofi_rxm: the file name carries the provider)
mkdir -p "$res/efa"
cat >"$res/efa/fabric_pingpong_tcp.txt" <<'EOF'
# fabric_pingpong: provider tcp;ofi_rxm, domain lo, 200 iterations per size, median of 5
# transport: provider tcp;ofi_rxm, 1 rail(s)
#      bytes     raw us  trnccl us   ratio   raw xchg trnccl xchg   ratio    raw GB/s trnccl GB/s   ratio
           8      10.38      10.94    1.05      15.18      15.27    1.01       0.001       0.001    1.00
     4194304    1215.07     585.37    0.48     976.96     584.08    0.60       3.795       6.456    1.70
EOF
grep '"tool": *"all_reduce"' "$here/fixture.jsonl" | grep '"nranks": *2' \
  >"$res/efa/all_reduce_efa_net_vs_mpi_tcp_btl.jsonl"
grep '"tool": *"all_reduce"' "$here/fixture.jsonl" | grep '"nranks": *2' \
  >"$res/efa/all_reduce_efa_tcp_vs_mpi_ofi_mtl.jsonl"

out="$tmp/docs"
"$PY" "$here/plot.py" "$out/perf" "$res/fixture.jsonl" >"$tmp/plot.log" 2>&1 ||
  fail "plot.py exited $? on the fixture: $(cat "$tmp/plot.log")"
grep -q "not JSON" "$tmp/plot.log" || fail "plot.py did not warn about the line that is not JSON"
for png in all_reduce_2ranks all_reduce_4ranks all_gather_2ranks sendrecv_2ranks; do
  f="$out/perf/$png.png"
  if [ ! -s "$f" ]; then
    fail "plot.py did not write $png.png"
  elif [ "$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')" != "89504e470d0a1a0a" ]; then
    fail "$png.png is not a PNG"
  fi
done
n=$(find "$out/perf" -type f | wc -l)
[ "$n" -eq 4 ] || fail "plot.py wrote $n files, expected 4 (one per tool and rank count)"

"$PY" "$here/report.py" "$res" -o "$out/PERFORMANCE.md" >"$tmp/report.log" 2>&1 ||
  fail "report.py exited $? on the fixture: $(cat "$tmp/report.log")"
md="$out/PERFORMANCE.md"
if [ -f "$md" ]; then
  expect_line "$md" "### all_reduce, 2 ranks, float sum"
  expect_line "$md" "![all_reduce, 2 ranks, float sum](perf/all_reduce_2ranks.png)"
  expect_line "$md" "| 8B | 0.0013 | 0.0012 | 6.00 | 0.0027 | 3.00 | 0.50x |"
  expect_line "$md" "| 2M | 2.10 | 2.33 | 1000 | 0.52 | 4000 | 4.00x |"
  expect_line "$md" "| 64M | 1.68 | 2.24 | 40000 | 0.14 | 480000 | 12.00x |"
  # no "ratio" field in the fixture's all_gather MPI row: computed from the two times
  expect_line "$md" "| 64M | 1.68 | 1.86 | 20000 | 1.12 | 30000 | 1.50x |"
  # sendrecv has no in-place column
  expect_line "$md" "| 1K | 0.10 | 10.0 | 0.20 | 5.00 | 0.50x |"
  expect_line "$md" "| all_reduce, 2 ranks, float sum at 8B: time | 6.00 us | 3.00 us | 0.50x |"
  expect_line "$md" "| all_reduce, 2 ranks, float sum at 64M: busbw | 1.68 GB/s | 0.14 GB/s | 12.00x |"
  expect_line "$md" "| all_gather, 2 ranks, float at 64M: busbw | 1.68 GB/s | 1.12 GB/s | 1.50x |"
  # 4 ranks: the 256 B row (0.10x) is below 1K and must not be the minimum
  expect_line "$md" \
    "| all_reduce, 4 ranks, float sum: lowest ratio over sizes >= 1K (2 sizes), at 4K | 0.12 GB/s | 0.14 GB/s | 0.90x |"
  expect_line "$md" "| BM_ReduceFloatSum | 64K (65536) | 2.00 | 150.0 | 1.50x |"
  expect_line "$md" "mpirun -np 2 build/bench/all_reduce_perf -b 8 -e 64M -R 3 -J fixture.jsonl"
  expect_line "$md" "### Point to point, tcp provider (bench/fabric_pingpong)"
  expect_line "$md" "| 4M | 1215.07 | 585.37 | 0.48 | 976.96 | 584.08 | 0.60 | 3.795 | 6.456 | 1.70 |"
  expect_line "$md" \
    "### all_reduce, 2 ranks, float sum over efa (net) beside Open MPI \`--mca pml ob1 --mca btl tcp,self\`"
  expect_line "$md" \
    "### all_reduce, 2 ranks, float sum over efa (tcp;ofi_rxm) beside Open MPI \`--mca pml cm --mca mtl ofi\` (tcp;ofi_rxm)"
  grep -q "one run on the machine described here" "$md" || fail "no one-run caveat"
  grep -q "medians of 3 interleaved timings" "$md" || fail "no -R medians note"
  grep -q "alltoall" "$md" && fail "the report mentions alltoall, which the fixture did not measure"
else
  fail "report.py wrote no $md"
fi

# --- bad input: a clear message and a non-zero exit, no traceback ---------------------------
: >"$tmp/empty.jsonl"
for args in "$tmp/e1 $tmp/empty.jsonl" "$tmp/e2 $tmp/missing.jsonl"; do
  # shellcheck disable=SC2086
  if "$PY" "$here/plot.py" $args >"$tmp/bad.log" 2>&1; then
    fail "plot.py $args exited 0"
  fi
  grep -q "^plot: error:" "$tmp/bad.log" || fail "plot.py $args: no error message"
  grep -q Traceback "$tmp/bad.log" && fail "plot.py $args: traceback"
done
mkdir -p "$tmp/nothing"
if "$PY" "$here/report.py" "$tmp/nothing" -o "$tmp/none.md" >"$tmp/bad.log" 2>&1; then
  fail "report.py on an empty directory exited 0"
fi
grep -q "^report: error:" "$tmp/bad.log" || fail "report.py on an empty directory: no error"
[ -e "$tmp/none.md" ] && fail "report.py wrote a report from an empty directory"
"$PY" "$here/plot.py" --help >/dev/null || fail "plot.py --help"
"$PY" "$here/report.py" --help >/dev/null || fail "report.py --help"

if [ "$failures" -eq 0 ]; then
  echo "bench/plot: all checks passed"
  exit 0
fi
echo "bench/plot: $failures check(s) failed"
exit 1
