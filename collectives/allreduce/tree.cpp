// Double binary tree all-reduce: two in-order binary trees over the ring order, the second
// shifted by one rank, each reducing half the buffer up to its root and broadcasting it back
// down, in window-sized chunks so that every level works on a different chunk at once. A rank
// is interior in at most one tree for even n, so each rank's links carry about the ring's
// bytes, but the depth is log2(n) instead of n: the large-scale form (NCCL's default at many
// nodes). Each element's final value is computed by one rank (its tree's root) and sent to the
// others: results are bitwise identical on every rank.
#include <algorithm>

#include "collectives/direct_rounds.hpp"
#include "collectives/tree.hpp"

namespace trnccl {
namespace {

struct Transfer {
  bool isSend;
  int peer;
  const void* src;
  void* dst;
  size_t bytes;
  RecvAction action;
};

// Every edge of a tree is timed alike on both of its ends (lockstep): at time t a rank's sends
// and receives pair with its peers' sends and receives of the same t, so time t completes on
// every rank together and two trees interleaved in one schedule cannot wait on each other in a
// cycle. upOffset[l]: the time label l sends chunk 0 to its parent (chunk k at k + offset);
// downDepth[l]: l receives chunk k back at k + depth (the root's children at depth 0).
struct TreeTiming {
  InOrderTree tree;
  std::vector<int> upOffset, downDepth;
  int maxOffset = 0, maxDepth = 0;

  explicit TreeTiming(int n) : tree(InOrderTree::of(n)), upOffset(n + 1, 0), downDepth(n + 1, 0) {
    ready(tree.root);
    for (int l = 1; l <= n; ++l)
      if (l != tree.root) maxOffset = std::max(maxOffset, upOffset[l]);
    depthBelow(tree.root, -1);
  }
  // When label's partial sums are complete (its children's arrive one per time step, the
  // earlier-ready child first, the other delayed if both would arrive at once).
  int ready(int label) {
    auto& kids = tree.children[label];
    if (kids.empty()) return upOffset[label] = 0;
    for (int child : kids) upOffset[child] = ready(child);
    std::stable_sort(kids.begin(), kids.end(),
                     [&](int x, int y) { return upOffset[x] < upOffset[y]; });
    if (kids.size() == 2) upOffset[kids[1]] = std::max(upOffset[kids[1]], upOffset[kids[0]] + 1);
    return upOffset[label] = upOffset[kids.back()] + 1;
  }
  void depthBelow(int label, int depth) {
    if (label != tree.root) downDepth[label] = depth;
    maxDepth = std::max(maxDepth, depth);
    for (int child : tree.children[label]) depthBelow(child, depth + 1);
  }
};

using Timeline = std::vector<std::vector<Transfer>>;  // transfers per time step

void at(Timeline& line, size_t t, const Transfer& x) {
  if (line.size() <= t) line.resize(t + 1);
  line[t].push_back(x);
}

// One tree's transfers (shifted by `shift` ring positions) for `count` elements from `begin`.
void treeTransfers(Timeline& line, const CollArgs& a, const CommView& c, const TreeTiming& timing,
                   int shift, size_t begin, size_t count, size_t chunkCount, size_t chunks,
                   size_t downStart) {
  const size_t esize = elementSize(a);
  const RingGroup& g = c.ring;
  const int n = g.size();
  const int me = (g.pos + n - shift) % n + 1;
  auto rankOf = [&](int label) { return g.at(label - 1 + shift); };
  auto offset = [&](size_t k) { return (begin + std::min(count, k * chunkCount)) * esize; };
  auto bytesOf = [&](size_t k) { return offset(k + 1) - offset(k); };
  const InOrderTree& tree = timing.tree;
  const bool root = me == tree.root;
  const auto& kids = tree.children[me];  // in arrival order
  const int lastDivisor = a.op == trncclAvg ? c.nranks : 0;
  for (size_t k = 0; k < chunks; ++k) {
    for (size_t i = 0; i < kids.size(); ++i) {
      const void* local = i == 0 ? byteAt(a.sendbuff, offset(k)) : byteAt(a.recvbuff, offset(k));
      const bool last = root && i + 1 == kids.size();
      at(line, k + timing.upOffset[kids[i]],
         {false, rankOf(kids[i]), nullptr, byteAt(a.recvbuff, offset(k)), bytesOf(k),
          RecvAction{RecvAction::Kind::kReduce, a.dtype, a.op, local, last ? lastDivisor : 0}});
    }
    if (!root) {
      const void* partial = kids.empty() ? a.sendbuff : a.recvbuff;
      at(line, k + timing.upOffset[me],
         {true, rankOf(tree.parent[me]), byteAt(partial, offset(k)), nullptr, bytesOf(k), {}});
      at(line, downStart + k + timing.downDepth[me],
         {false, rankOf(tree.parent[me]), nullptr, byteAt(a.recvbuff, offset(k)), bytesOf(k), {}});
    }
    for (int child : kids)
      at(line, downStart + k + timing.downDepth[child],
         {true, rankOf(child), byteAt(a.recvbuff, offset(k)), nullptr, bytesOf(k), {}});
  }
}

}  // namespace

Status allReduceTree(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t bytes = a.count * elementSize(a);
  if (c.nranks == 1) {
    b.copy(a.recvbuff, a.sendbuff, bytes);
    return Status::ok();
  }
  const size_t half = a.count / 2;
  // Both trees take the same number of chunks (the smaller half's last one may be empty) and
  // the down phase starts for both after the last step up, so every message up a tree precedes
  // every message down one. No ordered pair of ranks is child and parent in both trees (a
  // label's parent has a larger lowest set bit, and shifting by one makes one of the two odd),
  // so within a phase messages from one rank to another belong to one tree.
  const size_t chunkCount = std::max<size_t>(1, c.windowBytes / elementSize(a));
  const size_t chunks = std::max<size_t>(1, ceilDiv(a.count - half, chunkCount));
  const TreeTiming timing(c.nranks);  // the same labels for both trees; shifted ranks
  const size_t downStart = chunks + timing.maxOffset;
  Timeline line;
  treeTransfers(line, a, c, timing, 0, 0, half, chunkCount, chunks, downStart);
  treeTransfers(line, a, c, timing, 1, half, a.count - half, chunkCount, chunks, downStart);
  for (const auto& now : line) {
    if (now.empty()) continue;
    ConcurrentSteps together(b);
    for (const Transfer& x : now) {
      if (x.isSend)
        b.send(x.peer, x.src, x.bytes);
      else
        b.recv(x.peer, x.dst, x.bytes, x.action);
    }
  }
  return Status::ok();
}

}  // namespace trnccl
