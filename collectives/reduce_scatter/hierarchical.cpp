// Hierarchical reduce-scatter. Same ranks on every node: partial sums go around each node's
// ring along its links first (the blocks of the ranks at each position gathered into one
// part), then around the rings of ranks at the same position across nodes, where each rank
// sends only its position's blocks over efa. Uneven nodes: the hierarchical all-reduce of the
// whole input into scratch, keeping this rank's block (twice the optimal bytes; logged).
#include "collectives/direct_rounds.hpp"
#include "collectives/levels.hpp"
#include "collectives/shapes.hpp"

namespace trnccl {

Status reduceScatterHierarchical(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const HierarchicalShape& h = c.shapes->hierarchical;
  if (!h.fits)
    return makeError(Code::kInternalError, "hierarchical reduce-scatter: %s", h.whyNot.c_str());
  if (h.uniform) {
    reduceScatterOverGrid(b, a, h.levels, h.gridRanks, c.nranks);
    return Status::ok();
  }
  const size_t blockBytes = a.count * elementSize(a);
  CollArgs whole = a;
  whole.kind = CollKind::kAllReduce;
  whole.count = a.count * c.nranks;
  whole.recvbuff = b.scratch(c.nranks * blockBytes);
  TRNCCL_RETURN_IF_ERROR(allReduceHierarchical(b, whole, c));
  b.copy(a.recvbuff, byteAt(whole.recvbuff, c.rank * blockBytes), blockBytes);
  return Status::ok();
}

}  // namespace trnccl
