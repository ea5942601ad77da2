// Torus reduce-scatter: partial sums travel along the x links first (largest sets), then y,
// then across nodes, so the outer rings carry only their share.
#include "collectives/levels.hpp"
#include "collectives/shapes.hpp"

namespace trnccl {

Status reduceScatterTorus(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const TorusShape& t = c.shapes->torus;
  if (!t.fits) return makeError(Code::kInternalError, "torus reduce-scatter: %s", t.whyNot.c_str());
  reduceScatterOverGrid(b, a, t.levels, t.gridRanks, c.nranks);
  return Status::ok();
}

}  // namespace trnccl
