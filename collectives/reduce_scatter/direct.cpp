// Reduce-scatter over shared windows: each round stages, for every destination rank, a
// sub-block of the block it will own; each rank then reduces its sub-block from every window
// (rank order) straight into its output. Inputs up to TRNCCL_LL_MAX_BYTES in all go through the
// small-message lines instead. When every rank's input is trncclMemAlloc memory, each rank
// reduces its block straight out of every peer's input (collectives/shared_buffers.hpp).
#include "collectives/shared_buffers.hpp"

namespace trnccl {
namespace {

// The windows form's phases. References only (see two_shot.cpp's TwoShot).
struct ReduceScatterWindows {
  const CollArgs& a;
  const CommView& c;
  size_t esize = elementSize(a);
  size_t subBytes = subBlockBytes(c);
  size_t perRound = subBytes / esize;

  size_t rounds() const { return ceilDiv(a.count, perRound); }
  size_t roundLen(size_t k) const { return std::min(perRound, a.count - k * perRound); }
  // The other ranks' blocks only: this rank reduces its own block straight out of its input.
  void stage(ScheduleBuilder& b, int slot, size_t k) const {
    for (int q = 0; q < c.nranks; ++q)
      if (q != c.rank)
        b.copy(c.window(c.rank, slot) + q * subBytes,
               byteAt(a.sendbuff, (q * a.count + k * perRound) * esize), roundLen(k) * esize);
  }
  // In rank order (the same bits on every rank). In place the output is this rank's own block
  // of its input, read and written element by element in the same pass.
  void reduce(ScheduleBuilder& b, int slot, size_t k) const {
    const void* mine = byteAt(a.sendbuff, (c.rank * a.count + k * perRound) * esize);
    b.reduce(
        byteAt(a.recvbuff, k * perRound * esize), c.nranks,
        [&](int q) { return q == c.rank ? mine : c.window(q, slot) + c.rank * subBytes; },
        roundLen(k), a.op == trncclAvg ? c.nranks : 0);
  }
  void runRounds(ScheduleBuilder& b, size_t first, bool publish) const {
    directRoundsFrom(
        b, a, first, std::max<size_t>(rounds(), 1), publish,
        [&](int slot, size_t k) { stage(b, slot, k); },
        [&](int slot, size_t k) { reduce(b, slot, k); });
  }
  void finishFirstRound(ScheduleBuilder& later, int slot) const { reduce(later, slot, 0); }
  // The rest of the block in one pass out of the peers' inputs. In place the output is this
  // rank's own block of its input, which only this rank reads.
  void singleCopyRest(ScheduleBuilder& later) const {
    const size_t from = c.rank * a.count + perRound;  // elements into the input
    reduceFromPeers(later, a, c, byteAt(a.recvbuff, perRound * esize),
                    byteAt(a.sendbuff, from * esize), from * esize, a.count - perRound);
    later.waitAll(later.post());  // peers are done reading this rank's input
  }
};

}  // namespace

Status reduceScatterDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t esize = elementSize(a);
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
  const SharedNeed need{n * blockBytes, 0};
  windowsOrSingleCopy(
      b, a, c, need, [&] { return ownBuffersShared(a, c, need); },
      [](const CollArgs& args, const CommView& view) {
        return ReduceScatterWindows{args, view};
      });
  return Status::ok();
}

}  // namespace trnccl
