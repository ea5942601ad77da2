// Pipelined chain broadcast: from the root along the communicator's ring order (NeuronLinks
// inside a node that has them) in window-sized chunks; a rank forwards chunk k while it
// receives chunk k+1.
#include <algorithm>

#include "collectives/direct_rounds.hpp"
#include "collectives/ring_group.hpp"

namespace trnccl {

void chainBroadcast(ScheduleBuilder& b, const RingGroup& g, int rootPos, void* buf, size_t bytes,
                    size_t chunk) {
  const int n = g.size();
  if (n == 1) return;
  const int position = (g.pos - rootPos + n) % n;
  const bool isRoot = position == 0, forwards = position < n - 1;
  const size_t chunks = std::max<size_t>(1, ceilDiv(bytes, chunk));
  auto chunkPtr = [&](size_t k) { return byteAt(buf, k * chunk); };
  auto chunkBytes = [&](size_t k) {
    return k * chunk >= bytes ? 0 : std::min(chunk, bytes - k * chunk);
  };
  for (size_t k = 0; k <= chunks; ++k) {
    ConcurrentSteps together(b);
    if (k > 0 && forwards && !isRoot) b.send(g.next(), chunkPtr(k - 1), chunkBytes(k - 1));
    if (k < chunks && !isRoot) b.recv(g.prev(), chunkPtr(k), chunkBytes(k));
    if (k < chunks && isRoot) b.send(g.next(), chunkPtr(k), chunkBytes(k));
  }
}

Status broadcastChain(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t bytes = a.count * elementSize(a);
  if (c.rank == a.root) b.copy(a.recvbuff, a.sendbuff, bytes);
  const RingGroup& g = c.ring;
  chainBroadcast(b, g, g.positionOf(a.root), a.recvbuff, bytes, c.windowBytes);
  return Status::ok();
}

}  // namespace trnccl
