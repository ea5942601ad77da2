// Ring reduce-scatter: at step t a rank forwards its partial sum of block (r-t-1) and receives
// the predecessor's partial of block (r-t-2), adding its own input as the fragments land. Two
// scratch blocks alternate; the last step lands in the output. The input is never written.
#include "collectives/direct_rounds.hpp"

namespace trnccl {

Status reduceScatterRing(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t blockBytes = a.count * elementSize(a);
  const int n = c.nranks, r = c.rank;
  auto input = [&](int q) { return byteAt(a.sendbuff, q * blockBytes); };
  if (n == 1) {
    b.copy(a.recvbuff, input(0), blockBytes);
    return Status::ok();
  }
  char* scratch = b.scratch(2 * blockBytes);
  char* partial[2] = {scratch, scratch + blockBytes};
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int t = 0; t < n - 1; ++t) {
    int sendBlock = (r - t - 1 + 2 * n) % n, recvBlock = (r - t - 2 + 2 * n) % n;
    bool last = t == n - 2;
    void* dst = last ? a.recvbuff : partial[t % 2];
    ConcurrentSteps together(b);
    b.send(next, t == 0 ? input(sendBlock) : partial[(t - 1) % 2], blockBytes);
    RecvAction reduce{RecvAction::Kind::kReduce, a.dtype, a.op, input(recvBlock),
                      (last && a.op == trncclAvg) ? n : 0};
    b.recv(prev, dst, blockBytes, reduce);
  }
  return Status::ok();
}

}  // namespace trnccl
