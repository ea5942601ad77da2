// Pipelined chain reduce toward the root along the communicator's ring order (NeuronLinks
// inside a node that has them): the root's successor starts, the root ends, in window-sized
// chunks. Each rank adds its input to the partial sums as they arrive and forwards them.
#include "collectives/direct_rounds.hpp"

namespace trnccl {

Status reduceChain(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t esize = elementSize(a);
  const size_t bytes = a.count * esize;
  const RingGroup& g = c.ring;
  const int n = g.size();
  const bool isRoot = c.rank == a.root;
  if (n == 1) {
    b.copy(a.recvbuff, a.sendbuff, bytes);
    return Status::ok();
  }
  const int rootPos = g.positionOf(a.root);
  const int position = (g.pos - rootPos - 1 + 2 * n) % n;  // 0 starts the chain, n-1 is the root
  const int next = g.next(), prev = g.prev();
  const size_t chunk = c.windowBytes / esize * esize;
  const size_t chunks = std::max<size_t>(1, ceilDiv(bytes, chunk));
  auto chunkBytes = [&](size_t k) {
    return k * chunk >= bytes ? 0 : std::min(chunk, bytes - k * chunk);
  };
  // Where this rank's partial sums live: the input itself at the head of the chain, scratch in
  // the middle, the output at the root.
  void* partial = isRoot ? a.recvbuff : position == 0 ? nullptr : b.scratch(bytes);
  const void* outgoing = position == 0 ? a.sendbuff : partial;
  for (size_t k = 0; k <= chunks; ++k) {
    ConcurrentSteps together(b);
    if (k > 0 && !isRoot) b.send(next, byteAt(outgoing, (k - 1) * chunk), chunkBytes(k - 1));
    if (k < chunks && position > 0) {
      RecvAction reduce{RecvAction::Kind::kReduce, a.dtype, a.op, byteAt(a.sendbuff, k * chunk),
                        (isRoot && a.op == trncclAvg) ? n : 0};
      b.recv(prev, byteAt(partial, k * chunk), chunkBytes(k), reduce);
    }
  }
  return Status::ok();
}

}  // namespace trnccl
