// Reduce over shared windows: the two-shot reduction (split across all ranks), with only the
// root copying the reduced segments out.
#include "collectives/two_shot.hpp"

namespace trnccl {

Status reduceDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  twoShotDirect(b, a, c, a.root);
  return Status::ok();
}

}  // namespace trnccl
