// Calls on local peers' trncclMemAlloc buffers in one copy. A buffer in shm::sharedAlloc memory
// is mapped by its peers (transports/shm/shared_alloc.hpp): the direct reduce-scatter and
// all-reduce reduce each rank's part straight out of every peer's input, and an all-reduce's
// ranks copy the reduced parts out of each other's outputs; all-gather, all-to-all and
// broadcast read such buffers where they lie beyond the CMA band (whose limit is about the
// kernel's copy, which a mapped read does not use). Whether a call may take this form is known
// only once every rank has said where its buffers lie, so such calls publish their buffers with
// the windows form's first round and decide after that round's wait (every rank reads the same
// descriptors and decides alike; round 0 finishes through the windows either way).
#pragma once

#include <concepts>

#include "collectives/direct_rounds.hpp"

namespace trnccl {

// The bytes of each buffer peers must be able to map from its start (0: that buffer is not read
// by peers), on every rank, or only on `onlyRank` (a broadcast's root) when it is set.
struct SharedNeed {
  size_t sendBytes = 0;
  size_t recvBytes = 0;
  int onlyRank = -1;
};

// describe(a) plus where both buffers lie (address, and allocation when shared).
shm::OpDescriptor describeBuffers(const CollArgs& a);

// At build time: whether this rank's own buffers are shared as `need` says and its node lets
// ranks map each other's memory. When not, the call takes the windows (the other ranks learn
// it from this rank's descriptor), and the rank plans the windows form straight away.
bool ownBuffersShared(const CollArgs& a, const CommView& c, const SharedNeed& need);

// In a callback after the wait that follows the descriptors: whether every local rank's
// published buffers are shared as `need` says.
bool everyRankShares(const CommView& c, uint64_t seq, const SharedNeed& need);

// A windows form whose rounds after the first may instead read (and reduce) peers' buffers
// where they lie. Plans hold references to the call's arguments: the decision's callback,
// which outlives the call that built it, makes its own plan over its own copies of them.
//   stage(b, slot, 0)          round 0's first phase (this rank's part into its window slot);
//   finishFirstRound(b, slot)  the rest of round 0, through the windows;
//   runRounds(b, first, publish)  the windows form from round `first`;
//   singleCopyRest(b)          every round after the first out of the peers' buffers, ending
//                              where the peers are done reading this rank's.
template <typename Plan>
concept WindowsWithSingleCopyRest = requires(const Plan& p, ScheduleBuilder& b, int slot) {
  { p.rounds() } -> std::convertible_to<size_t>;
  p.stage(b, slot, size_t{0});
  p.finishFirstRound(b, slot);
  p.runRounds(b, size_t{0}, true);
  p.singleCopyRest(b);
};

// Plans the call through the windows, or, when it takes two rounds or more and `mayShare()`
// (usually: this rank's own buffers are shared as `need` says), publishes its buffers beside round
// 0's staging and decides after that round's first wait (which also checks the calls match): single
// copy for the rest when every rank's buffers meet the need, else the windows' rounds. Round 0
// finishes through the windows either way. A rank that plans the windows at once publishes a
// descriptor naming no buffers, which sends the others to the windows too. makePlan(args, view)
// makes the plan (see WindowsWithSingleCopyRest).
template <typename MayShare, typename MakePlan>
void windowsOrSingleCopy(ScheduleBuilder& b, const CollArgs& a, const CommView& c,
                         const SharedNeed& need, const MayShare& mayShare, MakePlan makePlan) {
  const auto plan = makePlan(a, c);
  static_assert(WindowsWithSingleCopyRest<decltype(plan)>);
  // A call of one round gains nothing from the single-copy form: it would add a post and wait
  // (nobody may return while peers read its buffers) to save no copy the staging has not
  // already made. (mayShare() looks the buffers up: not for the many one-round calls.)
  if (plan.rounds() < 2 || !mayShare()) {
    plan.runRounds(b, 0, true);
    return;
  }
  b.publishDescriptor(describeBuffers(a));
  const int slot = b.acquireSlot();
  plan.stage(b, slot, 0);
  b.waitAll(b.post());
  b.checkDescriptors();
  const uint64_t seq = b.schedule().descriptor.seq;
  b.callback([args = a, view = c, seq, need, slot, makePlan](ScheduleBuilder& later) {
    const auto plan = makePlan(args, view);
    plan.finishFirstRound(later, slot);
    later.releaseSlotAt(slot, later.nextPostValue());
    if (everyRankShares(view, seq, need))
      plan.singleCopyRest(later);
    else
      plan.runRounds(later, 1, false);
    return Status::ok();
  });
}

// dst = every local rank's send buffer at `offset`, count elements, reduced in rank order (this
// rank's own from `own`), read where they lie: through this process's mapping of the peer's
// allocation, or, if mapping fails here, first copied into scratch by CMA.
void reduceFromPeers(ScheduleBuilder& later, const CollArgs& a, const CommView& c, void* dst,
                     const void* own, size_t offset, size_t count);

}  // namespace trnccl
