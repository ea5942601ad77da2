#include "collectives/shapes.hpp"

#include <algorithm>

namespace trnccl {
namespace {

HierarchicalShape hierarchicalShape(const topology::Topology& t, int rank) {
  HierarchicalShape h;
  const int nodes = t.nnodes();
  for (int node = 0; node < nodes; ++node) h.nodeOrder.push_back(t.linkOrder(node));
  if (nodes < 2) {
    h.whyNot = "the communicator has one node";
    return h;
  }
  h.owners = static_cast<int>(h.nodeOrder[0].size());
  for (const auto& order : h.nodeOrder) h.owners = std::min<int>(h.owners, order.size());
  h.uniform = std::all_of(h.nodeOrder.begin(), h.nodeOrder.end(), [&](const auto& order) {
    return static_cast<int>(order.size()) == h.owners;
  });
  const int myNode = t.nodeOf(rank);
  const auto& mine = h.nodeOrder[myNode];
  h.position = static_cast<int>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
  if (h.position >= h.owners) {
    h.foldInto = mine[h.position % h.owners];
  } else {
    h.inner = RingGroup::of(std::vector<int>(mine.begin(), mine.begin() + h.owners), rank);
    std::vector<int> peers;
    for (const auto& order : h.nodeOrder) peers.push_back(order[h.position]);
    h.outer = RingGroup::of(peers, rank);
    for (size_t i = h.owners + h.position; i < mine.size(); i += h.owners)
      h.folded.push_back(mine[i]);
    if (h.uniform) {
      h.levels = {h.inner, h.outer};
      for (int p = 0; p < h.owners; ++p)
        for (int node = 0; node < nodes; ++node) h.gridRanks.push_back(h.nodeOrder[node][p]);
    }
  }
  h.fits = true;
  return h;
}

TorusShape torusShape(const topology::Topology& t, int rank) {
  TorusShape s;
  const topology::DeviceGraph& g = t.devices();
  if (!t.hasDevices() || g.torus[0] < 2 || g.torus[1] < 2) {
    s.whyNot = t.hasDevices() ? "the chips do not form a torus (" + g.shape() + ")"
                              : "there is no device graph (TRNCCL_TOPO_FILE/PRESET, sysfs)";
    return s;
  }
  const int x = g.torus[0], y = g.torus[1];
  for (int node = 0; node < t.nnodes(); ++node)
    if (static_cast<int>(t.ranksOfNode(node).size()) != x * y) {
      s.whyNot = strformat("node %d has %zu rank(s); the %dx%d torus needs one rank on every chip",
                           node, t.ranksOfNode(node).size(), x, y);
      return s;
    }
  // Rank of (node, chip): every chip of every node has exactly one rank (the count is checked
  // above; Topology::build refuses two ranks on one chip; the file format numbers a torus's
  // chips 0..X*Y-1).
  std::vector<std::vector<int>> rankAt(t.nnodes(), std::vector<int>(x * y, -1));
  for (int r = 0; r < t.nranks(); ++r) {
    if (t.chipOf(r) < 0 || t.chipOf(r) >= x * y) {
      s.whyNot = strformat("rank %d drives chip %d, outside the %dx%d torus", r, t.chipOf(r), x, y);
      return s;
    }
    rankAt[t.nodeOf(r)][t.chipOf(r)] = r;
  }
  const int node = t.nodeOf(rank), chip = t.chipOf(rank);
  const int cx = chip % x, cy = chip / x;
  std::vector<int> row, column, across;
  for (int i = 0; i < x; ++i) row.push_back(rankAt[node][cy * x + i]);
  for (int j = 0; j < y; ++j) column.push_back(rankAt[node][j * x + cx]);
  for (int n = 0; n < t.nnodes(); ++n) across.push_back(rankAt[n][chip]);
  s.levels.push_back(RingGroup::of(row, rank));
  s.levels.push_back(RingGroup::of(column, rank));
  if (t.nnodes() > 1) s.levels.push_back(RingGroup::of(across, rank));
  for (int i = 0; i < x; ++i)
    for (int j = 0; j < y; ++j)
      for (int n = 0; n < t.nnodes(); ++n) s.gridRanks.push_back(rankAt[n][j * x + i]);
  s.describe = t.nnodes() > 1 ? strformat("%dx%dx%d", x, y, t.nnodes()) : strformat("%dx%d", x, y);
  s.fits = true;
  return s;
}

}  // namespace

Shapes buildShapes(const topology::Topology& topology, int rank) {
  return {hierarchicalShape(topology, rank), torusShape(topology, rank)};
}

}  // namespace trnccl
