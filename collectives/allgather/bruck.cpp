// Bruck's all-gather: ceil(log2 n) rounds instead of the ring's n-1, for any n. In round k
// (distance d = 2^k) every rank sends the min(d, n - d) blocks it holds, starting at its own,
// to rank - d, and receives as many from rank + d; after the last round it holds all n. Blocks
// go straight to their places in recvbuff (no rotation at the end): a run of blocks that wraps
// past the last rank travels as two messages, split at the same place on both sides. Each rank
// sends about as many bytes as in the ring; what it saves is rounds, so it is the small-message
// form. Ranks are the communicator's (blocks lie in rank order in recvbuff).
#include <algorithm>

#include "collectives/direct_rounds.hpp"

namespace trnccl {

Status allGatherBruck(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t blockBytes = a.count * elementSize(a);
  const int n = c.nranks, r = c.rank;
  b.copy(byteAt(a.recvbuff, r * blockBytes), a.sendbuff, blockBytes);
  // The run of `count` blocks from block `first` (mod n), as at most two contiguous pieces.
  auto pieces = [&](int first, int count, auto&& each) {
    first %= n;
    const int head = std::min(count, n - first);
    each(first, head);
    if (count > head) each(0, count - head);
  };
  for (int d = 1; d < n; d *= 2) {
    const int count = std::min(d, n - d);
    const int to = (r - d + n) % n, from = (r + d) % n;
    // Pieces of one direction must pair with the partner's pieces in order, so each piece
    // pairing gets its own group when either run wraps.
    std::vector<std::pair<int, int>> sends, recvs;
    pieces(r, count, [&](int first, int k) { sends.emplace_back(first, k); });
    pieces(from, count, [&](int first, int k) { recvs.emplace_back(first, k); });
    const size_t rounds = std::max(sends.size(), recvs.size());
    for (size_t i = 0; i < rounds; ++i) {
      ConcurrentSteps together(b);
      if (i < sends.size())
        b.send(to, byteAt(a.recvbuff, sends[i].first * blockBytes), sends[i].second * blockBytes);
      if (i < recvs.size())
        b.recv(from, byteAt(a.recvbuff, recvs[i].first * blockBytes), recvs[i].second * blockBytes);
    }
  }
  return Status::ok();
}

}  // namespace trnccl
