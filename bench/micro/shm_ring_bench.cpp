// Ping-pong through the shm transport's rings between two threads standing in for two ranks
// of one node (the segment is the real one, in /dev/shm). Reports round-trip time per size.
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "transports/shm/segment.hpp"
#include "transports/shm/shm_transport.hpp"

namespace {

using trnccl::TransferOp;
using trnccl::shm::Segment;
using trnccl::shm::ShmTransport;

void spinSend(ShmTransport& t, int peer, const void* src, size_t bytes) {
  TransferOp op;
  op.peer = peer;
  op.src = src;
  op.bytes = bytes;
  while (!t.progressSend(op).value()) {
  }
}

void spinRecv(ShmTransport& t, int peer, void* dst, size_t bytes) {
  TransferOp op;
  op.peer = peer;
  op.dst = dst;
  op.bytes = bytes;
  while (!t.progressRecv(op).value()) {
  }
}

void BM_ShmRingPingPong(benchmark::State& state) {
  size_t bytes = static_cast<size_t>(state.range(0));
  trnccl::shm::SegmentParams params;
  params.localSize = 2;
  std::string name = "trnccl-bench-" + std::to_string(getpid());
  Segment a, b;
  auto deadline = trnccl::Deadline::after(10);
  auto alive = [] { return trnccl::Status::ok(); };
  // Both "ranks" live in this process: the first waits in attach until the second maps it.
  trnccl::Status first;
  std::thread creator([&] { first = a.attach("/dev/shm", name, 0, params, deadline, alive); });
  trnccl::Status second = b.attach("/dev/shm", name, 1, params, deadline, alive);
  creator.join();
  if (!first.isOk() || !second.isOk()) {
    state.SkipWithError("cannot create the shared-memory segment");
    return;
  }
  ShmTransport rank0(a, 0, {0, 1}), rank1(b, 1, {0, 1});
  std::vector<char> buf0(bytes, 1), buf1(bytes);
  std::atomic<bool> stop{false};
  std::atomic<long> rounds{0};
  std::thread echo([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      long want = rounds.load(std::memory_order_acquire);
      if (want <= 0) continue;
      spinRecv(rank1, 0, buf1.data(), bytes);
      spinSend(rank1, 0, buf1.data(), bytes);
      rounds.fetch_sub(1, std::memory_order_acq_rel);
    }
  });
  for (auto _ : state) {
    rounds.fetch_add(1, std::memory_order_acq_rel);
    spinSend(rank0, 1, buf0.data(), bytes);
    spinRecv(rank0, 1, buf0.data(), bytes);
  }
  stop = true;
  echo.join();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes * 2);
}

}  // namespace

BENCHMARK(BM_ShmRingPingPong)->Arg(8)->Arg(4096)->Arg(64 << 10)->Arg(1 << 20)->UseRealTime();
BENCHMARK_MAIN();
