// Reductions straight out of local peers' trncclMemAlloc buffers: the single-copy form of the
// direct reduce-scatter and all-reduce. A buffer in shm::sharedAlloc memory is mapped by its
// peers (transports/shm/shared_alloc.hpp), so a rank reduces its part from every peer's input
// where it lies, with no staging copy, and an all-reduce's ranks then copy the reduced parts
// out of each other's outputs. Whether a call may take this form is known only once every rank
// has said where its buffers lie, so such calls publish their buffers with the windows form's
// first round, and decide after that round's wait (every rank reads the same descriptors and
// decides alike; the staged round goes unused when the answer is yes).
#pragma once

#include "collectives/direct_rounds.hpp"

namespace trnccl {

// The bytes of each buffer peers must be able to map from its start (0: that buffer is not read
// by peers).
struct SharedNeed {
  size_t sendBytes = 0;
  size_t recvBytes = 0;
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

// dst = every local rank's send buffer at `offset`, count elements, reduced in rank order (this
// rank's own from `own`), read where they lie: through this process's mapping of the peer's
// allocation, or, if mapping fails here, first copied into scratch by CMA.
void reduceFromPeers(ScheduleBuilder& later, const CollArgs& a, const CommView& c, void* dst,
                     const void* own, size_t offset, size_t count);

}  // namespace trnccl
