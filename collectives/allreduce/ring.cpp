// Ring all-reduce: a reduce-scatter around the ring (n-1 steps, each rank sends one segment to
// its successor while receiving and reducing another from its predecessor), then an all-gather
// of the reduced segments (n-1 steps). Works over any transport. Each segment's final value
// is computed by one rank and copied to the others, so results are bitwise identical on every
// rank; fp16/bf16 partial sums are rounded at each hop (unlike the direct algorithm). Calls of
// at most kRecursiveDoublingMaxBytes go by recursive doubling instead (fewer rounds).
#include "collectives/direct_rounds.hpp"

namespace trnccl {

// Out of place, no up-front copy of the input: the first send and every reduction read their
// untouched segments straight from sendbuff, and every segment of recvbuff is written by a
// reduction or by the all-gather (each rank's last reduced segment is the one the all-gather
// does not bring back).
Status allReduceRing(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t esize = elementSize(a);
  const int n = c.nranks, r = c.rank;
  if (n == 1) {
    b.copy(a.recvbuff, a.sendbuff, a.count * esize);
    return Status::ok();
  }
  if (a.count * esize <= kRecursiveDoublingMaxBytes) return allReduceRecursiveDoubling(b, a, c);
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  auto segIn = [&](const void* buf, int s) {
    return byteAt(buf, partBegin(a.count, n, s) * esize);
  };
  auto segPtr = [&](int s) { return byteAt(a.recvbuff, partBegin(a.count, n, s) * esize); };
  auto segBytes = [&](int s) {
    return (partBegin(a.count, n, s + 1) - partBegin(a.count, n, s)) * esize;
  };
  for (int t = 0; t < n - 1; ++t) {
    int sendSeg = (r - t + n) % n, recvSeg = (r - t - 1 + 2 * n) % n;
    ConcurrentSteps together(b);
    // Step 0 sends this rank's own input; later steps forward what the previous step reduced.
    b.send(next, t == 0 ? segIn(a.sendbuff, sendSeg) : segPtr(sendSeg), segBytes(sendSeg));
    RecvAction reduce{RecvAction::Kind::kReduce, a.dtype, a.op, segIn(a.sendbuff, recvSeg),
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
