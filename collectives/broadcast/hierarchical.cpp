// Hierarchical broadcast: a pipelined chain across nodes among one rank per node (the root on
// its node, the first rank of the others' link order), then a chain inside every node along
// its links. Each byte crosses efa once per node. Any ranks per node.
#include "collectives/direct_rounds.hpp"
#include "collectives/ring_group.hpp"
#include "collectives/shapes.hpp"

namespace trnccl {

Status broadcastHierarchical(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const HierarchicalShape& h = c.shapes->hierarchical;
  const size_t bytes = a.count * elementSize(a);
  if (c.rank == a.root) b.copy(a.recvbuff, a.sendbuff, bytes);
  const topology::Topology& t = *c.topology;
  const int rootNode = t.nodeOf(a.root), myNode = t.nodeOf(c.rank);
  auto head = [&](int node) { return node == rootNode ? a.root : h.nodeOrder[node][0]; };
  if (c.rank == head(myNode) && t.nnodes() > 1) {
    std::vector<int> heads;
    for (int node = 0; node < t.nnodes(); ++node) heads.push_back(head(node));
    chainBroadcast(b, RingGroup::of(heads, c.rank), rootNode, a.recvbuff, bytes, c.windowBytes);
  }
  const RingGroup node = RingGroup::of(h.nodeOrder[myNode], c.rank);
  chainBroadcast(b, node, node.positionOf(head(myNode)), a.recvbuff, bytes, c.windowBytes);
  return Status::ok();
}

}  // namespace trnccl
