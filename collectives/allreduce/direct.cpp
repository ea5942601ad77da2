// All-reduce over shared windows. Tiny messages (<= 896 B): the LL protocol, one cache line
// per 56 bytes carrying data and flag together. Small messages: one-shot (every rank reduces
// every input, one synchronisation). Large messages: two-shot (two_shot.cpp), so a byte is copied
// in once and out once and the reduction work is split n ways. Sources are always reduced in rank
// order: results are bitwise identical on every rank.
#include "collectives/direct_rounds.hpp"
#include "collectives/two_shot.hpp"

namespace trnccl {

Status allReduceDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t bytes = a.count * elementSize(a);
  if (bytes <= c.llMaxBytes && c.nranks <= shm::kLLMaxRanks) {
    // Tiny messages: data and flag share cache lines (segment.hpp, LLLine).
    b.publishDescriptor(describe(a));
    auto ll = b.nextLLSlot();
    b.llWrite(ll, a.sendbuff, bytes);
    b.llReduce(ll, a.sendbuff, a.recvbuff, a.count, a.op == trncclAvg ? c.nranks : 0);
    return Status::ok();
  }
  if (bytes > c.oneShotMaxBytes || bytes > c.windowBytes) {
    twoShotDirect(b, a, c, /*copyOutRank=*/-1);
    return Status::ok();
  }
  const int n = c.nranks;
  directRounds(
      b, a, 1, true, [&](int slot, size_t) { b.copy(c.window(c.rank, slot), a.sendbuff, bytes); },
      [&](int slot, size_t) {
        // This rank's own input comes from its send buffer, not its window (see llReduce).
        b.reduce(
            a.recvbuff, n,
            [&](int q) {
              return q == c.rank ? a.sendbuff : static_cast<const void*>(c.window(q, slot));
            },
            a.count, a.op == trncclAvg ? n : 0);
      });
  return Status::ok();
}

}  // namespace trnccl
