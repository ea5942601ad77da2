// Binomial trees over the communicator's ring order, rooted anywhere: the shape the binomial
// broadcast and reduce share.
#pragma once

#include <vector>

#include "collectives/algorithm.hpp"

namespace trnccl {

struct BinomialTree {
  int parent = -1;            // global rank; -1 at the root
  std::vector<int> children;  // global ranks, farthest subtree (largest) first
  // The tree over g's ranks numbered from root's position: position v's parent is v with its
  // lowest set bit cleared; its children are v + 2^k for every 2^k below that bit.
  static BinomialTree of(const RingGroup& g, int root);
};

}  // namespace trnccl
