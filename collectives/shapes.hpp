// The groups topology-shaped algorithms run their rings over, computed once per communicator
// from the Topology: the hierarchical shape (the ranks of each node along its links; the ranks
// holding the same position on every node) and the torus shape (one ring per torus dimension,
// plus one across nodes). Each says why it does not fit when it does not, for the log and for
// TRNCCL_ALGO refusals.
#pragma once

#include <string>
#include <vector>

#include "collectives/algorithm.hpp"

namespace trnccl {

struct HierarchicalShape {
  bool fits = false;
  std::string whyNot;    // when !fits
  int owners = 0;        // k: ranks of the smallest node; positions 0..k-1 of every node own parts
  bool uniform = false;  // every node has exactly k ranks
  int position = 0;      // this rank's index in its node's link order
  RingGroup inner;       // this node's owners (positions 0..k-1), when position < k
  RingGroup outer;       // the rank at this position on every node, when position < k
  int foldInto = -1;     // position >= k: the owner (global rank) this rank's input goes to
  std::vector<int> folded;                  // an owner's ranks that fold into it, in position order
  std::vector<std::vector<int>> nodeOrder;  // every node's ranks in link order
  // When uniform: the grid (position, node) as levels {inner, outer}, and the rank at each
  // grid index position * nodes + node (the order grid all-gathers lay blocks out in).
  std::vector<RingGroup> levels;
  std::vector<int> gridRanks;
};

struct TorusShape {
  bool fits = false;
  std::string whyNot;
  std::vector<RingGroup> levels;  // x, y (z or nodes when the job spans several)
  std::vector<int> gridRanks;     // rank at grid index (x * Y + y) * Z + z
  std::string describe;           // "4x4" or "4x4x2"
};

struct Shapes {
  HierarchicalShape hierarchical;
  TorusShape torus;
};

Shapes buildShapes(const topology::Topology& topology, int rank);

}  // namespace trnccl
