// Ring all-gather: n-1 steps; at each, forward the block received last step to the successor.
#include "collectives/direct_rounds.hpp"

namespace trnccl {

Status allGatherRing(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t blockBytes = a.count * elementSize(a);
  const int n = c.nranks, r = c.rank;
  auto block = [&](int q) { return byteAt(a.recvbuff, q * blockBytes); };
  b.copy(block(r), a.sendbuff, blockBytes);
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int t = 0; t < n - 1; ++t) {
    ConcurrentSteps together(b);
    b.send(next, block((r - t + n) % n), blockBytes);
    b.recv(prev, block((r - t - 1 + 2 * n) % n), blockBytes);
  }
  return Status::ok();
}

}  // namespace trnccl
