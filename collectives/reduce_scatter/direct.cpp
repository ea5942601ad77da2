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
  void stage(ScheduleBuilder& b, int slot, size_t k) const {
    for (int q = 0; q < c.nranks; ++q)
      b.copy(c.window(c.rank, slot) + q * subBytes,
             byteAt(a.sendbuff, (q * a.count + k * perRound) * esize), roundLen(k) * esize);
  }
  void reduce(ScheduleBuilder& b, int slot, size_t k) const {
    b.reduce(
        byteAt(a.recvbuff, k * perRound * esize), c.nranks,
        [&](int q) { return c.window(q, slot) + c.rank * subBytes; }, roundLen(k),
        a.op == trncclAvg ? c.nranks : 0);
  }
  void runRounds(ScheduleBuilder& b, size_t first, bool publish) const {
    directRoundsFrom(
        b, a, first, std::max<size_t>(rounds(), 1), publish,
        [&](int slot, size_t k) { stage(b, slot, k); },
        [&](int slot, size_t k) { reduce(b, slot, k); });
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
  const ReduceScatterWindows plan{a, c};
  const SharedNeed need{n * blockBytes, 0};
  // One round gains nothing from the single-copy form (see two_shot.cpp).
  if (plan.rounds() < 2 || !ownBuffersShared(a, c, need)) {
    plan.runRounds(b, 0, true);
    return Status::ok();
  }
  decideAfterFirstRound(
      b, a, c, need, [&](int slot) { plan.stage(b, slot, 0); },
      [args = a, view = c](ScheduleBuilder& later, int slot, bool allShared) {
        // Round 0 finishes through the windows either way; the rest through the windows too,
        // or, when every rank's input is shared, in one pass out of the peers' inputs. In
        // place the output is this rank's own block of its input, which only this rank reads.
        const ReduceScatterWindows plan{args, view};
        plan.reduce(later, slot, 0);
        later.releaseSlotAt(slot, later.nextPostValue());
        if (!allShared) {
          plan.runRounds(later, 1, false);
          return Status::ok();
        }
        const size_t from = view.rank * args.count + plan.perRound;  // elements into the input
        reduceFromPeers(later, args, view, byteAt(args.recvbuff, plan.perRound * plan.esize),
                        byteAt(args.sendbuff, from * plan.esize), from * plan.esize,
                        args.count - plan.perRound);
        later.waitAll(later.post());  // peers are done reading this rank's input
        return Status::ok();
      });
  return Status::ok();
}

}  // namespace trnccl
