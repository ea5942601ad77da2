// Barrier over shared windows: post, then wait until every rank has posted.
#include "collectives/direct_rounds.hpp"

namespace trnccl {

Status barrierDirect(ScheduleBuilder& b, const CollArgs& a, const CommView&) {
  b.publishDescriptor(describe(a));
  b.waitAll(b.post());
  b.checkDescriptors();
  return Status::ok();
}

}  // namespace trnccl
