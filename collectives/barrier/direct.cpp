// Barrier over shared memory: tag my small-message line, wait until every rank's carries the
// same tag (the tag includes the call's signature, so a peer in a different call never
// matches; the health check then reports the mismatch).
#include "collectives/direct_rounds.hpp"

namespace trnccl {

Status barrierDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  b.publishDescriptor(describe(a));
  if (c.nranks > shm::kLLMaxRanks) {
    b.waitAll(b.post());
    b.checkDescriptors();
    return Status::ok();
  }
  auto ll = b.nextLLSlot();
  b.llWrite(ll, nullptr, 0);
  b.llWait(ll);
  return Status::ok();
}

}  // namespace trnccl
