// Torus all-gather: the blocks travel along the outer rings first (across nodes, then y),
// where each rank forwards little, and along the x links last, with the largest sets.
#include "collectives/levels.hpp"
#include "collectives/shapes.hpp"

namespace trnccl {

Status allGatherTorus(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const TorusShape& t = c.shapes->torus;
  if (!t.fits) return makeError(Code::kInternalError, "torus all-gather: %s", t.whyNot.c_str());
  allGatherOverGrid(b, a, t.levels, t.gridRanks);
  return Status::ok();
}

}  // namespace trnccl
