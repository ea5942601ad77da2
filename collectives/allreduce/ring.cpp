// Ring all-reduce: a reduce-scatter around the ring (n-1 steps, each rank sends one segment to
// its successor while receiving and reducing another from its predecessor), then an all-gather
// of the reduced segments (n-1 steps). Works over any transport. Each segment's final value
// is computed by one rank and copied to the others, so results are bitwise identical on every
// rank; fp16/bf16 partial sums are rounded at each hop (unlike the direct algorithm).
#include "collectives/direct_rounds.hpp"

namespace trnccl {

Status allReduceRing(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t esize = elementSize(a);
  const int n = c.nranks, r = c.rank;
  b.copy(a.recvbuff, a.sendbuff, a.count * esize);
  if (n == 1) return Status::ok();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  auto segPtr = [&](int s) { return byteAt(a.recvbuff, partBegin(a.count, n, s) * esize); };
  auto segBytes = [&](int s) {
    return (partBegin(a.count, n, s + 1) - partBegin(a.count, n, s)) * esize;
  };
  for (int t = 0; t < n - 1; ++t) {
    int sendSeg = (r - t + n) % n, recvSeg = (r - t - 1 + 2 * n) % n;
    ConcurrentSteps together(b);
    b.send(next, segPtr(sendSeg), segBytes(sendSeg));
    RecvAction reduce{RecvAction::Kind::kReduce, a.dtype, a.op, segPtr(recvSeg),
                      (t == n - 2 && a.op == trncclAvg) ? n : 0};
    b.recv(prev, segPtr(recvSeg), segBytes(recvSeg), reduce);
  }
  for (int t = 0; t < n - 1; ++t) {
    int sendSeg = (r + 1 - t + n) % n, recvSeg = (r - t + n) % n;
    ConcurrentSteps together(b);
    b.send(next, segPtr(sendSeg), segBytes(sendSeg));
    b.recv(prev, segPtr(recvSeg), segBytes(recvSeg));
  }
  return Status::ok();
}

}  // namespace trnccl
