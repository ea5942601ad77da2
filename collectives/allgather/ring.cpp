// Ring all-gather: n-1 steps; at each, forward the block received last step to the successor,
// in the communicator's ring order (along NeuronLinks inside a node that has them).
#include "collectives/direct_rounds.hpp"

namespace trnccl {

Status allGatherRing(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t blockBytes = a.count * elementSize(a);
  const RingGroup& g = c.ring;
  const int n = g.size();
  auto block = [&](int position) { return byteAt(a.recvbuff, g.at(position) * blockBytes); };
  b.copy(block(g.pos), a.sendbuff, blockBytes);
  for (int t = 0; t < n - 1; ++t) {
    ConcurrentSteps together(b);
    b.send(g.next(), block(g.pos - t), blockBytes);
    b.recv(g.prev(), block(g.pos - t - 1), blockBytes);
  }
  return Status::ok();
}

}  // namespace trnccl
