// Binomial-tree broadcast: ceil(log2 n) rounds; in each, every rank that has the data sends it
// to one that does not yet, so the number of holders doubles. Each message is the whole buffer:
// the small-message form (the chain streams large ones at link speed). Ranks are numbered from
// the root in the communicator's ring order, so the last round, where half the ranks receive,
// goes between link neighbours.
#include "collectives/direct_rounds.hpp"
#include "collectives/tree.hpp"

namespace trnccl {

Status broadcastBinomial(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t bytes = a.count * elementSize(a);
  if (c.rank == a.root) b.copy(a.recvbuff, a.sendbuff, bytes);
  const BinomialTree tree = BinomialTree::of(c.ring, a.root);
  if (tree.parent >= 0) b.recv(tree.parent, a.recvbuff, bytes);
  for (int child : tree.children) b.send(child, a.recvbuff, bytes);
  return Status::ok();
}

}  // namespace trnccl
