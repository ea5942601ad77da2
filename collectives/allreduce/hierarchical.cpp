// Hierarchical all-reduce: a ring reduce-scatter among the ranks of each node (along its
// NeuronLinks when it has them), an all-reduce of each rank's part with the ranks at the same
// position on the other nodes (over efa: each rank sends 2(N-1)/N of its node's share, not of
// the whole buffer), and a ring all-gather inside the node. Works for any ranks per node: with
// k ranks on the smallest node, the ranks past position k of a bigger node first hand their
// input to the owner at position (their position mod k), which reduces it into its own, and get
// the result back at the end.
#include "collectives/levels.hpp"
#include "collectives/shapes.hpp"

namespace trnccl {

Status allReduceHierarchical(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const HierarchicalShape& h = c.shapes->hierarchical;
  if (!h.fits)
    return makeError(Code::kInternalError, "hierarchical all-reduce: %s", h.whyNot.c_str());
  const size_t bytes = a.count * elementSize(a);
  if (h.foldInto >= 0) {
    b.send(h.foldInto, a.sendbuff, bytes);
    b.recv(h.foldInto, a.recvbuff, bytes);
    return Status::ok();
  }
  const void* input = a.sendbuff;
  for (int folded : h.folded) {
    RecvAction reduce{RecvAction::Kind::kReduce, a.dtype, a.op, input, 0};
    b.recv(folded, a.recvbuff, bytes, reduce);
    input = a.recvbuff;
  }
  allReduceOverLevelsPipelined(b, a, input, a.recvbuff, {h.inner, h.outer}, c.nranks,
                               b.pipelineSlices());
  ConcurrentSteps together(b);
  for (int folded : h.folded) b.send(folded, a.recvbuff, bytes);
  return Status::ok();
}

}  // namespace trnccl
