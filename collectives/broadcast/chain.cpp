// Pipelined chain broadcast: root -> root+1 -> ... in window-sized chunks; a rank forwards
// chunk k while it receives chunk k+1.
#include "collectives/direct_rounds.hpp"

namespace trnccl {

Status broadcastChain(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t bytes = a.count * elementSize(a);
  const int n = c.nranks, r = c.rank;
  const bool isRoot = r == a.root;
  if (isRoot) b.copy(a.recvbuff, a.sendbuff, bytes);
  if (n == 1) return Status::ok();
  const int position = (r - a.root + n) % n;
  const bool forwards = position < n - 1;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const size_t chunk = c.windowBytes;
  const size_t chunks = std::max<size_t>(1, ceilDiv(bytes, chunk));
  auto chunkPtr = [&](size_t k) { return byteAt(a.recvbuff, k * chunk); };
  auto chunkBytes = [&](size_t k) {
    return k * chunk >= bytes ? 0 : std::min(chunk, bytes - k * chunk);
  };
  for (size_t k = 0; k <= chunks; ++k) {
    ConcurrentSteps together(b);
    if (k > 0 && forwards && !isRoot) b.send(next, chunkPtr(k - 1), chunkBytes(k - 1));
    if (k < chunks && !isRoot) b.recv(prev, chunkPtr(k), chunkBytes(k));
    if (k < chunks && isRoot) b.send(next, chunkPtr(k), chunkBytes(k));
  }
  return Status::ok();
}

}  // namespace trnccl
