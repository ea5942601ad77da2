// Trees over the communicator's ring order: binomial trees rooted anywhere (the binomial
// broadcast and reduce) and the in-order binary trees of the double-binary-tree all-reduce.
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

// An in-order binary tree over the n ranks of g, numbered 1..n from position `shift` on: label i
// (lowest set bit h) has children i - h/2 and i + h/2 (or the nearest label below n on that
// side), and the largest power of two <= n is the root. Shifting by one makes the ranks that
// are leaves of the shift-0 tree interior ones (for even n, every rank is a leaf in one of the
// two trees), which is what lets two trees each carry half the data at full speed.
struct BinaryTree {
  int parent = -1;            // global rank; -1 at the root
  std::vector<int> children;  // global ranks, at most two (left first)
  static BinaryTree inOrder(const RingGroup& g, int shift);
};

// The whole in-order tree over labels 1..n (index 0 unused): parent label (0 at the root) and
// child labels, left first. Schedules that time every edge alike on both ends need all of it.
struct InOrderTree {
  int root = 1;
  std::vector<int> parent;
  std::vector<std::vector<int>> children;
  static InOrderTree of(int n);
};

}  // namespace trnccl
