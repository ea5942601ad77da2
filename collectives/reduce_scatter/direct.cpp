// Reduce-scatter over shared windows: each round stages, for every destination rank, a
// sub-block of the block it will own; each rank then reduces its sub-block from every window
// (rank order) straight into its output. Inputs up to TRNCCL_LL_MAX_BYTES in all go through the
// small-message lines instead.
#include "collectives/direct_rounds.hpp"

namespace trnccl {

Status reduceScatterDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t esize = elementSize(a);
  const size_t subBytes = subBlockBytes(c);
  const size_t perRound = subBytes / esize;
  const int n = c.nranks;
  const size_t blockBytes = a.count * esize;
  if (blockBytes > 0 && n * blockBytes <= c.llMaxBytes && n <= shm::kLLMaxRanks) {
    // Tiny inputs: every rank puts its whole input in its small-message lines and reduces its
    // own block out of everyone's lines (as the all-reduce does, segment.hpp, LLLine).
    b.publishDescriptor(describe(a));
    auto ll = b.nextLLSlot();
    b.llWrite(ll, a.sendbuff, n * blockBytes);
    b.llReduce(ll, byteAt(a.sendbuff, c.rank * blockBytes), a.recvbuff, a.count,
               a.op == trncclAvg ? n : 0, c.rank * blockBytes);
    return Status::ok();
  }
  auto roundLen = [&](size_t k) { return std::min(perRound, a.count - k * perRound); };
  directRounds(
      b, a, ceilDiv(a.count, perRound), true,
      [&](int slot, size_t k) {
        for (int q = 0; q < n; ++q)
          b.copy(c.window(c.rank, slot) + q * subBytes,
                 byteAt(a.sendbuff, (q * a.count + k * perRound) * esize), roundLen(k) * esize);
      },
      [&](int slot, size_t k) {
        b.reduce(
            byteAt(a.recvbuff, k * perRound * esize), n,
            [&](int q) { return c.window(q, slot) + c.rank * subBytes; }, roundLen(k),
            a.op == trncclAvg ? n : 0);
      });
  return Status::ok();
}

}  // namespace trnccl
