// Binomial-tree reduce: the broadcast's tree walked backwards. Each rank reduces its
// children's partial results into its own, nearest child first, then sends the sum to its
// parent; ceil(log2 n) rounds of whole buffers, the small-message form. Non-root ranks keep
// their partial sums in scratch (their receive buffers are not touched).
#include "collectives/direct_rounds.hpp"
#include "collectives/tree.hpp"

namespace trnccl {

Status reduceBinomial(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t bytes = a.count * elementSize(a);
  const bool isRoot = c.rank == a.root;
  const BinomialTree tree = BinomialTree::of(c.ring, a.root);
  if (tree.children.empty()) {
    if (isRoot)
      b.copy(a.recvbuff, a.sendbuff, bytes);
    else
      b.send(tree.parent, a.sendbuff, bytes);
    return Status::ok();
  }
  void* partial = isRoot ? a.recvbuff : b.scratch(bytes);
  const void* sofar = a.sendbuff;
  // Children are listed farthest first (the order the broadcast sends in); their subtrees
  // finish nearest first.
  for (size_t i = tree.children.size(); i-- > 0;) {
    const bool last = i == 0;
    b.recv(tree.children[i], partial, bytes,
           RecvAction{RecvAction::Kind::kReduce, a.dtype, a.op, sofar,
                      isRoot && last && a.op == trncclAvg ? c.nranks : 0});
    sofar = partial;
  }
  if (!isRoot) b.send(tree.parent, partial, bytes);
  return Status::ok();
}

}  // namespace trnccl
