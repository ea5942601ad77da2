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

#include <functional>

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

// What a call does once every rank has published its buffers: plans the rest of the call,
// given the slot round 0 was staged in and whether every rank's buffers meet the need.
using RestOfCall = std::function<Status(ScheduleBuilder& later, int slot, bool allShared)>;

// Plans the windows form's round 0 (stage0(slot) stages it) with this rank's buffers published
// beside it; after that round's first wait (which also checks the calls match), rest decides
// and plans the remainder. Calls that may take the single-copy form go this way; the others
// plan the windows straight away (their descriptors name no buffers, which tells the rest).
template <typename Stage0>
void decideAfterFirstRound(ScheduleBuilder& b, const CollArgs& a, const CommView& c,
                           const SharedNeed& need, const Stage0& stage0, RestOfCall rest) {
  b.publishDescriptor(describeBuffers(a));
  const int slot = b.acquireSlot();
  stage0(slot);
  b.waitAll(b.post());
  b.checkDescriptors();
  const uint64_t seq = b.schedule().descriptor.seq;
  b.callback([view = c, seq, need, slot, rest = std::move(rest)](ScheduleBuilder& later) {
    return rest(later, slot, everyRankShares(view, seq, need));
  });
}

// dst = every local rank's send buffer at `offset`, count elements, reduced in rank order (this
// rank's own from `own`), read where they lie: through this process's mapping of the peer's
// allocation, or, if mapping fails here, first copied into scratch by CMA.
void reduceFromPeers(ScheduleBuilder& later, const CollArgs& a, const CommView& c, void* dst,
                     const void* own, size_t offset, size_t count);

}  // namespace trnccl
