// Pipelined chain reduce toward the root: root+1 -> root+2 -> ... -> root, in window-sized
// chunks. Each rank adds its input to the partial sums as they arrive and forwards them.
#include "collectives/direct_rounds.hpp"

namespace trnccl {

Status reduceChain(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t esize = elementSize(a);
  const size_t bytes = a.count * esize;
  const int n = c.nranks, r = c.rank;
  const bool isRoot = r == a.root;
  if (n == 1) {
    b.copy(a.recvbuff, a.sendbuff, bytes);
    return Status::ok();
  }
  const int position = (r - a.root - 1 + 2 * n) % n;  // 0 starts the chain, n-1 is the root
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
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
