#!/usr/bin/env bash
# The main job on a fresh machine: install, build, and run an all-reduce benchmark across 4
# local ranks with result checking (the #wrong column must be 0).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
exec build/bench/trnccl-run -np 4 build/bench/all_reduce_perf -b 8 -e 64M -f 4 -c 1 "$@"
