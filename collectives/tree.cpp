#include "collectives/tree.hpp"

namespace trnccl {

BinomialTree BinomialTree::of(const RingGroup& g, int root) {
  const int n = g.size(), rootPos = g.positionOf(root);
  const int v = (g.pos - rootPos + n) % n;
  auto rankAt = [&](int index) { return g.at(rootPos + index); };
  BinomialTree tree;
  int lowBit = 1;
  while (lowBit < n && !(v & lowBit)) lowBit *= 2;
  if (v != 0) tree.parent = rankAt(v - lowBit);
  for (int mask = lowBit / 2; mask >= 1; mask /= 2)
    if (v + mask < n) tree.children.push_back(rankAt(v + mask));
  return tree;
}

}  // namespace trnccl
