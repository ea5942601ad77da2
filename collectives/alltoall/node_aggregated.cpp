// Node-aggregated all-to-all(v): what the ranks of a node send to another node travels as one
// message between one pair of ranks, the ports of the two nodes (port(n, m) = the rank at
// position m mod size(n) of node n's link order), instead of one message per rank pair:
// 1. every rank packs its blocks for node m's ranks into one buffer and sends it to its node's
//    port for m (the blocks for its own node's ranks go straight to them);
// 2. the port reorders what it gathered by destination rank and exchanges it with node m's
//    port for this node, one message each way over efa;
// 3. the port hands each rank of its node the blocks from node m, which that rank unpacks.
// Only blocks of up to TRNCCL_AGGREGATE_MAX_BYTES take that path: aggregation saves messages,
// which small blocks are made of, and costs copies (pack, gather, reorder, fan out, unpack),
// which large blocks are made of; a larger block goes straight from its sender to its
// receiver, in step 1. Both ends of a block know its size (sendcounts on one, recvcounts on
// the other), so they take the same path without asking each other.
// All-to-all-v first gathers every local rank's send and receive counts around the node ring,
// so that ports know the sizes; the plan for the data is built once they are known. A count
// mismatch between two ranks of different nodes surfaces as a size mismatch between the two
// ports' messages (the error names the ports).
#include <memory>

#include "collectives/direct_rounds.hpp"
#include "collectives/ring_group.hpp"
#include "collectives/shapes.hpp"

namespace trnccl {
namespace {

// Sizes every rank of this node sends to and receives from every rank, in bytes: row q of
// `send` is what local rank q (position q of the node's link order) sends to each rank.
struct CountTables {
  std::vector<std::vector<size_t>> send, recv;
};

class Aggregation {
 public:
  Aggregation(const CollArgs& a, const CommView& c, std::shared_ptr<const CountTables> tables)
      : a_(a), c_(c), h_(c.shapes->hierarchical), t_(*c.topology), tables_(std::move(tables)) {
    myNode_ = t_.nodeOf(c.rank);
    esize_ = elementSize(a);
  }

  Status build(ScheduleBuilder& b) {
    const std::vector<int>& mine = h_.nodeOrder[myNode_];
    const int nodes = t_.nnodes();
    // What this rank packs for each other node, and (as a port) gathers, sends and receives.
    std::vector<size_t> packOffset(nodes, 0), gatherOffset(nodes, 0), wireOffset(nodes, 0),
        inOffset(nodes, 0), unpackOffset(nodes, 0);
    size_t total = a_.sendbuff == a_.recvbuff ? inputExtent() : 0;
    const size_t stagedBytes = total;
    for (int m = 0; m < nodes; ++m) {
      if (m == myNode_) continue;
      packOffset[m] = total;
      total += toNode(c_.rank, m);
      unpackOffset[m] = total;
      total += fromNode(m, c_.rank);
      if (port(myNode_, m) != c_.rank) continue;
      gatherOffset[m] = total;
      total += nodeToNode(myNode_, m);
      wireOffset[m] = total;
      total += nodeToNode(myNode_, m);
      inOffset[m] = total;
      total += nodeToNode(m, myNode_);
    }
    char* scratch = b.scratch(total);
    const void* source = a_.sendbuff;
    if (stagedBytes) {
      b.copy(scratch, a_.sendbuff, stagedBytes);
      source = scratch;
    }
    auto sendBlock = [&](int j) { return byteAt(source, sendOffset(j)); };
    auto recvBlock = [&](int s) { return byteAt(a_.recvbuff, recvOffset(s)); };

    // 1. Pack this rank's blocks per destination node.
    for (int m = 0; m < nodes; ++m) {
      if (m == myNode_) continue;
      size_t at = packOffset[m];
      for (int j : h_.nodeOrder[m]) {
        if (viaPort(c_.rank, j)) b.copy(scratch + at, sendBlock(j), viaPort(c_.rank, j));
        at += viaPort(c_.rank, j);
      }
    }
    if (bytes(c_.rank, c_.rank) != expected(c_.rank))
      return makeError(Code::kInvalidUsage,
                       "AllToAllv: rank %d sends itself sendcounts[%d]=%zu elements but expects "
                       "recvcounts[%d]=%zu",
                       c_.rank, c_.rank, bytes(c_.rank, c_.rank) / esize_, c_.rank,
                       expected(c_.rank) / esize_);
    b.copy(recvBlock(c_.rank), sendBlock(c_.rank), expected(c_.rank));
    {
      // Packs to the ports, ports gathering their node's packs, and the node's own blocks
      // straight to their ranks, all at once.
      ConcurrentSteps together(b);
      for (int p : mine) {
        if (p == c_.rank) continue;
        b.send(p, sendBlock(p), bytes(c_.rank, p));
        b.recv(p, recvBlock(p), expected(p));  // a different size is a reported mismatch
      }
      // Large blocks for other nodes' ranks, straight (see the top of this file).
      for (int m = 0; m < nodes; ++m) {
        if (m == myNode_) continue;
        for (int j : h_.nodeOrder[m]) {
          if (straight(c_.rank, j)) b.send(j, sendBlock(j), bytes(c_.rank, j));
          if (straight(j, c_.rank)) b.recv(j, recvBlock(j), expected(j));
        }
      }
      for (int m = 0; m < nodes; ++m) {
        if (m == myNode_) continue;
        const int to = port(myNode_, m);
        if (to != c_.rank) {
          b.send(to, scratch + packOffset[m], toNode(c_.rank, m));
          continue;
        }
        size_t at = gatherOffset[m];
        for (int q : mine) {
          if (q == c_.rank)
            b.copy(scratch + at, scratch + packOffset[m], toNode(q, m));
          else
            b.recv(q, scratch + at, toNode(q, m));
          at += toNode(q, m);
        }
      }
    }
    // 2. Ports reorder by destination rank and exchange with the other node's port.
    for (int m = 0; m < nodes; ++m) {
      if (m == myNode_ || port(myNode_, m) != c_.rank) continue;
      size_t at = wireOffset[m];
      for (int j : h_.nodeOrder[m]) {
        size_t from = gatherOffset[m];
        for (int q : mine) {
          size_t skip = 0;
          for (int k : h_.nodeOrder[m]) {
            if (k == j) break;
            skip += viaPort(q, k);
          }
          if (viaPort(q, j)) b.copy(scratch + at, scratch + from + skip, viaPort(q, j));
          at += viaPort(q, j);
          from += toNode(q, m);
        }
      }
    }
    {
      ConcurrentSteps together(b);
      for (int m = 0; m < nodes; ++m) {
        if (m == myNode_ || port(myNode_, m) != c_.rank) continue;
        b.send(port(m, myNode_), scratch + wireOffset[m], nodeToNode(myNode_, m));
        b.recv(port(m, myNode_), scratch + inOffset[m], nodeToNode(m, myNode_));
      }
    }
    // 3. Ports fan the other nodes' blocks out; every rank takes its own and unpacks them.
    {
      ConcurrentSteps together(b);
      for (int m = 0; m < nodes; ++m) {
        if (m == myNode_) continue;
        const int from = port(myNode_, m);
        if (from == c_.rank) {
          size_t at = inOffset[m];
          for (int j : mine) {
            if (j == c_.rank)
              b.copy(scratch + unpackOffset[m], scratch + at, fromNode(m, j));
            else
              b.send(j, scratch + at, fromNode(m, j));
            at += fromNode(m, j);
          }
        } else {
          b.recv(from, scratch + unpackOffset[m], fromNode(m, c_.rank));
        }
      }
    }
    for (int m = 0; m < nodes; ++m) {
      if (m == myNode_) continue;
      size_t at = unpackOffset[m];
      for (int s : h_.nodeOrder[m]) {
        if (viaPort(s, c_.rank)) b.copy(recvBlock(s), scratch + at, viaPort(s, c_.rank));
        at += viaPort(s, c_.rank);
      }
    }
    return Status::ok();
  }

 private:
  bool v() const { return a_.kind == CollKind::kAllToAllv; }
  size_t sendOffset(int j) const { return (v() ? a_.sdispls[j] : j * a_.count) * esize_; }
  size_t recvOffset(int s) const { return (v() ? a_.rdispls[s] : s * a_.count) * esize_; }
  // What this rank's own call says it receives from s (its recvcounts), which is what may be
  // written at its receive offset; the tables hold what the senders say.
  size_t expected(int s) const { return (v() ? a_.recvcounts[s] : a_.count) * esize_; }
  size_t inputExtent() const {
    size_t extent = 0;
    for (int j = 0; j < c_.nranks; ++j)
      extent = std::max(extent, sendOffset(j) + (v() ? a_.sendcounts[j] : a_.count) * esize_);
    return extent;
  }
  int port(int node, int towards) const {
    const auto& order = h_.nodeOrder[node];
    return order[towards % order.size()];
  }
  int localIndex(int rank) const { return t_.localRank(rank); }
  // Bytes rank s sends rank j; one of them is on this node (whose tables are known).
  size_t bytes(int s, int j) const {
    if (!tables_) return a_.count * esize_;
    if (t_.nodeOf(s) == myNode_) return tables_->send[position(s)][j];
    return tables_->recv[position(j)][s];
  }
  // Whether the block from s to j, of `size` bytes, goes straight, not through the ports (only
  // between different nodes); and what of the block from s to j goes through them.
  bool straight(int s, int j, size_t size) const {
    return t_.nodeOf(s) != t_.nodeOf(j) && size > c_.aggregateMaxBytes;
  }
  bool straight(int s, int j) const { return straight(s, j, bytes(s, j)); }
  size_t viaPort(int s, int j) const {
    const size_t size = bytes(s, j);  // looked up once: the pack and reorder loops call this
    return straight(s, j, size) ? 0 : size;
  }
  int position(int rank) const {
    const auto& order = h_.nodeOrder[myNode_];
    return static_cast<int>(std::find(order.begin(), order.end(), rank) - order.begin());
  }
  // What goes through the ports from rank q to node m, and from node m to rank j.
  size_t toNode(int q, int m) const {
    size_t sum = 0;
    for (int j : h_.nodeOrder[m]) sum += viaPort(q, j);
    return sum;
  }
  size_t fromNode(int m, int j) const {
    size_t sum = 0;
    for (int s : h_.nodeOrder[m]) sum += viaPort(s, j);
    return sum;
  }
  // Everything node `from` sends node `to` (one of them is this node).
  size_t nodeToNode(int from, int to) const {
    size_t sum = 0;
    if (from == myNode_) {
      for (int q : h_.nodeOrder[from]) sum += toNode(q, to);
    } else {
      for (int j : h_.nodeOrder[to]) sum += fromNode(from, j);
    }
    return sum;
  }

  CollArgs a_;
  CommView c_;
  const HierarchicalShape& h_;
  const topology::Topology& t_;
  std::shared_ptr<const CountTables> tables_;
  int myNode_ = 0;
  size_t esize_ = 1;
};

}  // namespace

Status allToAllNodeAggregated(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const HierarchicalShape& h = c.shapes->hierarchical;
  if (!h.fits)
    return makeError(Code::kInternalError, "node-aggregated all-to-all: %s", h.whyNot.c_str());
  if (a.kind == CollKind::kAllToAll) return Aggregation(a, c, nullptr).build(b);
  // All-to-all-v: every local rank's send and receive counts, around the node's ring.
  const std::vector<int>& mine = h.nodeOrder[c.topology->nodeOf(c.rank)];
  const int local = static_cast<int>(mine.size());
  const size_t row = 2 * c.nranks * sizeof(size_t);
  char* table = b.scratch(local * row);
  const RingGroup ring = RingGroup::of(mine, c.rank);
  auto* own = reinterpret_cast<size_t*>(table + ring.pos * row);
  const size_t esize = elementSize(a);
  for (int j = 0; j < c.nranks; ++j) {
    own[j] = a.sendcounts[j] * esize;
    own[c.nranks + j] = a.recvcounts[j] * esize;
  }
  CollArgs bytesArgs = a;
  bytesArgs.dtype = trncclUint8;
  std::vector<Span> rows;
  for (int q = 0; q < local; ++q) rows.push_back({q * row, row});
  ringAllGatherParts(b, ring, bytesArgs, table, rows, 0);
  CollArgs args = a;  // the callback outlives this call
  b.callback([args, c, table, local, row](ScheduleBuilder& later) -> Status {
    auto tables = std::make_shared<CountTables>();
    for (int q = 0; q < local; ++q) {
      const auto* r = reinterpret_cast<const size_t*>(table + q * row);
      tables->send.emplace_back(r, r + c.nranks);
      tables->recv.emplace_back(r + c.nranks, r + 2 * c.nranks);
    }
    return Aggregation(args, c, tables).build(later);
  });
  return Status::ok();
}

}  // namespace trnccl
