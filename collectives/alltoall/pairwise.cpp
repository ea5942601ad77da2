// Pairwise all-to-all(v): the own block is copied, then at step t a rank sends to r+t and
// receives from r-t. In-place calls stage the input in scratch first, since received blocks
// would otherwise overwrite blocks not yet sent. Message sizes are checked on arrival, so a
// sendcounts/recvcounts mismatch is reported by the receiver.
#include "collectives/direct_rounds.hpp"

namespace trnccl {

Status allToAllPairwise(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t esize = elementSize(a);
  const int n = c.nranks, r = c.rank;
  const bool v = a.kind == CollKind::kAllToAllv;
  auto sendBytes = [&](int q) { return (v ? a.sendcounts[q] : a.count) * esize; };
  auto sendOffset = [&](int q) { return (v ? a.sdispls[q] : q * a.count) * esize; };
  auto recvBytes = [&](int q) { return (v ? a.recvcounts[q] : a.count) * esize; };
  auto recvOffset = [&](int q) { return (v ? a.rdispls[q] : q * a.count) * esize; };
  const void* source = a.sendbuff;
  if (a.sendbuff == a.recvbuff) {
    size_t extent = 0;
    for (int q = 0; q < n; ++q) extent = std::max(extent, sendOffset(q) + sendBytes(q));
    char* staged = b.scratch(extent);
    b.copy(staged, a.sendbuff, extent);
    source = staged;
  }
  b.copy(byteAt(a.recvbuff, recvOffset(r)), byteAt(source, sendOffset(r)), recvBytes(r));
  for (int t = 1; t < n; ++t) {
    int to = (r + t) % n, from = (r - t + n) % n;
    ConcurrentSteps together(b);
    b.send(to, byteAt(source, sendOffset(to)), sendBytes(to));
    b.recv(from, byteAt(a.recvbuff, recvOffset(from)), recvBytes(from));
  }
  return Status::ok();
}

}  // namespace trnccl
