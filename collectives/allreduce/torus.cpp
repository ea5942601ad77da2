// Torus all-reduce: a ring reduce-scatter along the x links (each row of the torus), then
// along the y links on the row's share, then (several nodes, e.g. the UltraServer's z rings)
// across nodes on what is left, and the all-gathers back in reverse. Every ring is a ring of
// links; the bytes a level moves shrink by the sizes of the levels before it.
#include "collectives/levels.hpp"
#include "collectives/shapes.hpp"

namespace trnccl {

Status allReduceTorus(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const TorusShape& t = c.shapes->torus;
  if (!t.fits) return makeError(Code::kInternalError, "torus all-reduce: %s", t.whyNot.c_str());
  allReduceOverLevelsPipelined(b, a, a.sendbuff, a.recvbuff, t.levels, c.nranks,
                               b.pipelineSlices());
  return Status::ok();
}

}  // namespace trnccl
