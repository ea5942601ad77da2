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

namespace {

int lowBit(int label) {
  return label & -label;
}
// The parent of label in the untruncated in-order tree: the neighbour h away whose lowest
// set bit is 2h.
int nominalParent(int label) {
  const int h = lowBit(label);
  return (label & (2 * h)) ? label - h : label + h;
}

}  // namespace

InOrderTree InOrderTree::of(int n) {
  InOrderTree tree;
  while (tree.root * 2 <= n) tree.root *= 2;
  tree.parent.assign(n + 1, 0);
  tree.children.assign(n + 1, {});
  for (int label = 1; label <= n; ++label) {
    if (label == tree.root) continue;
    int parent = nominalParent(label);
    while (parent > n) parent = nominalParent(parent);  // labels past n do not exist
    tree.parent[label] = parent;
  }
  // Left child (smaller label) first.
  for (int label = 1; label <= n; ++label)
    if (tree.parent[label]) tree.children[tree.parent[label]].push_back(label);
  return tree;
}

BinaryTree BinaryTree::inOrder(const RingGroup& g, int shift) {
  const int n = g.size();
  const int label = (g.pos + n - shift % n) % n + 1;  // 1..n
  auto rankOf = [&](int l) { return g.at(l - 1 + shift); };
  const InOrderTree whole = InOrderTree::of(n);
  BinaryTree tree;
  if (whole.parent[label]) tree.parent = rankOf(whole.parent[label]);
  for (int child : whole.children[label]) tree.children.push_back(rankOf(child));
  return tree;
}

}  // namespace trnccl
