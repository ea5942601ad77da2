// Hierarchical all-gather. Same ranks on every node: the blocks go around the rings of ranks
// at the same position across nodes first (each rank forwards only its position's blocks over
// efa), then around each node's ring along its links with the nodes' blocks gathered. Uneven
// nodes: every rank hands its block to its node's first rank, those ring the nodes' blocks
// between them, and each node's first rank chains the whole result along its node.
#include "collectives/direct_rounds.hpp"
#include "collectives/levels.hpp"
#include "collectives/shapes.hpp"

namespace trnccl {

Status allGatherHierarchical(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const HierarchicalShape& h = c.shapes->hierarchical;
  if (!h.fits)
    return makeError(Code::kInternalError, "hierarchical all-gather: %s", h.whyNot.c_str());
  if (h.uniform) {
    allGatherOverGrid(b, a, h.levels, h.gridRanks);
    return Status::ok();
  }
  const size_t blockBytes = a.count * elementSize(a);
  auto block = [&](int rank) { return byteAt(a.recvbuff, rank * blockBytes); };
  const topology::Topology& t = *c.topology;
  const int myNode = t.nodeOf(c.rank);
  const std::vector<int>& mine = h.nodeOrder[myNode];
  const int leader = mine[0];
  if (c.rank != leader) {
    b.send(leader, a.sendbuff, blockBytes);
  } else {
    b.copy(block(c.rank), a.sendbuff, blockBytes);
    ConcurrentSteps together(b);
    for (size_t i = 1; i < mine.size(); ++i) b.recv(mine[i], block(mine[i]), blockBytes);
  }
  const int nodes = t.nnodes();
  if (c.rank == leader) {
    std::vector<int> leaders;
    for (const auto& order : h.nodeOrder) leaders.push_back(order[0]);
    const RingGroup ring = RingGroup::of(leaders, c.rank);
    for (int step = 0; step < nodes - 1; ++step) {
      ConcurrentSteps together(b);
      for (int r : h.nodeOrder[(myNode - step + nodes) % nodes])
        b.send(ring.next(), block(r), blockBytes);
      for (int r : h.nodeOrder[(myNode - step - 1 + 2 * nodes) % nodes])
        b.recv(ring.prev(), block(r), blockBytes);
    }
  }
  chainBroadcast(b, RingGroup::of(mine, c.rank), 0, a.recvbuff, c.nranks * blockBytes,
                 c.windowBytes);
  return Status::ok();
}

}  // namespace trnccl
