#include "collectives/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "collectives/levels.hpp"
#include "collectives/shapes.hpp"
#include "core/strformat.hpp"
#include "core/text_file.hpp"

namespace trnccl {

using topology::LinkClass;

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// One message of `bytes` over a link class: alpha + bytes * beta (GB/s = 1e3 bytes/us).
// `senders`: how many ranks of a node send such a message across nodes in the same round;
// where the node's efa capacity is shared (CostParams::efaShared) they queue on it.
double message(const CostParams& c, LinkClass link, double bytes, int senders = 1) {
  const LinkCost& l = c.of(link);
  const double share = link == LinkClass::kEfa && c.efaShared ? std::max(1, senders) : 1;
  return l.alphaUs + share * bytes / (l.gbps * 1e3);
}
double reduceUs(const CostParams& c, double bytes) {
  return bytes / (c.reduceGBps * 1e3);
}
double copyUs(const CostParams& c, double bytes) {
  return bytes / (c.copyGBps * 1e3);
}
// A message reduced as it lands (a kRecv with a reduction) is read once, by the reduction,
// instead of by the receive's copy that message() already counts: the reduction adds only
// what it costs beyond that copy.
double landedReduceUs(const CostParams& c, double bytes) {
  return std::max(0.0, reduceUs(c, bytes) - copyUs(c, bytes));
}
int ceilLog2(int n) {
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  return rounds;
}
int floorPow2(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// The link a message between ranks `distance` apart in ring order takes. Inside a node with a
// device graph only ring neighbours are linked (the ring follows the links); farther pairs go
// over host shared memory. Across nodes, partners closer than a node's size share it when the
// ring goes node by node and every node holds the same power of two of ranks; otherwise some
// pair of the round straddles two nodes, and the round waits for it.
LinkClass pairLink(const PlanShape& s, int distance) {
  const bool sameNode =
      s.nodes == 1 || (s.uniform && (s.perNode & (s.perNode - 1)) == 0 && distance < s.perNode);
  if (!sameNode) return LinkClass::kEfa;
  if (s.intra == LinkClass::kNeuronLink && distance != 1) return LinkClass::kShm;
  return s.intra;
}
// A ring over every rank (along the links inside a node) waits for its slowest hop.
LinkClass ringLink(const PlanShape& s) {
  return s.nodes == 1 ? s.intra : LinkClass::kEfa;
}
// The senders that queue for one node's efa capacity when `perNode` ranks of every node send
// across nodes at once. Where the nodes are emulated on one machine whose ranks outnumber its
// cores (the only case in which a plan spanning nodes is oversubscribed, comm_init.cpp), every
// node's efa bytes are the same cores' kernel copying, so the senders of all nodes queue.
int efaQueue(const PlanShape& s, int perNode) {
  return perNode * (s.oversubscribed && s.nodes > 1 ? s.nodes : 1);
}
// How many ranks of a node send across nodes at once when every rank sends to the rank
// `distance` after it (ranks lie node by node): those within `distance` of the node's end.
int pairSenders(const PlanShape& s, int distance) {
  return std::max(1, std::min({distance, s.perNode, s.nranks - distance}));
}
// ... and how many queue for the node's efa capacity when every rank of every node sends.
int nodeSenders(const PlanShape& s, int distance) {
  return efaQueue(s, pairSenders(s, distance));
}
// Schedules whose partners are arbitrary rank pairs (pairwise exchange, Bruck, dissemination).
LinkClass anyPairLink(const PlanShape& s) {
  return s.nodes > 1                         ? LinkClass::kEfa
         : s.intra == LinkClass::kNeuronLink ? LinkClass::kShm
                                             : s.intra;
}

struct Level {
  int size;
  LinkClass link;
  int senders = 1;  // ranks of a node using the link at once (message())
};

// Reduce-scatter (or all-gather: the same messages) through levels, inner first: level i's
// n_i - 1 rounds each move the range left after the levels before it, split n_i ways.
double overLevels(const CostParams& c, const std::vector<Level>& levels, double bytes,
                  bool reduces) {
  double t = 0, part = bytes;
  for (const Level& l : levels) {
    if (l.size < 2) continue;
    part /= l.size;
    t += (l.size - 1) *
         (message(c, l.link, part, l.senders) + c.stepUs + (reduces ? landedReduceUs(c, part) : 0));
  }
  return t;
}
double allReduceOverLevels(const CostParams& c, const std::vector<Level>& levels, double bytes) {
  return overLevels(c, levels, bytes, true) + overLevels(c, levels, bytes, false);
}
// Pipelined over slices: a two-stage pipeline of the levels inside the node and those across,
// each slice 1/P of the buffer: P times the slower stage plus one of the faster.
double pipelinedAllReduce(const CostParams& c, const std::vector<Level>& levels, double bytes,
                          int slices) {
  std::vector<Level> inside, across;
  for (const Level& l : levels) (l.link == LinkClass::kEfa ? across : inside).push_back(l);
  if (slices <= 1 || across.empty() || inside.empty()) return allReduceOverLevels(c, levels, bytes);
  // The across-node levels see the slice already split by the inner levels.
  double innerShare = 1;
  for (const Level& l : inside) innerShare *= l.size;
  const double slice = bytes / slices;
  const double a = allReduceOverLevels(c, inside, slice);
  const double b = allReduceOverLevels(c, across, slice / innerShare);
  return slices * std::max(a, b) + std::min(a, b) + (slices - 1) * c.sliceUs;
}
// A chain of n ranks streaming `bytes` in window-sized pieces, `slowHops` of its n - 1 hops
// over `link` and the others over the node's own link (s.intra); pipelined, each piece follows
// the one before by the slowest hop. With more ranks than cores a broadcast's hops do not
// overlap: every rank that forwards a piece needs a core while all of them are busy, so each
// piece pays every hop. Measured, 2 emulated nodes x 2 ranks on 2 cores (docs/planner/runs
// amd-2026-12-07-bcast-01, -02): the ring's chain (hops shm, efa, shm) 1.16-1.9x behind the
// hierarchical broadcast (efa, then shm inside both nodes at once) from 4 MiB, where the
// overlapping model put it ahead. A reduction's chain keeps the overlap: at 4 ranks on 2 cores
// it was the fastest reduce at 1-64 MiB (its hops share the reductions that direct's root
// makes alone), 1.1-1.9x ahead of direct.
double chain(const CostParams& c, const PlanShape& s, int n, LinkClass link, int slowHops,
             double bytes, bool reduces) {
  if (n < 2) return 0;
  const double piece = std::min<double>(bytes, static_cast<double>(s.windowBytes));
  const double pieces = std::max(1.0, std::ceil(bytes / static_cast<double>(s.windowBytes)));
  if (s.oversubscribed && !reduces)
    return pieces * (slowHops * message(c, link, piece) +
                     (n - 1 - slowHops) * message(c, s.intra, piece) + (n - 1) * c.stepUs);
  return (n - 2 + pieces) *
         (message(c, link, piece) + c.stepUs + (reduces ? landedReduceUs(c, piece) : 0));
}
// The fold of recursive doubling / halving for n not a power of two: the extra ranks hand their
// input in before and get the result back after. `landed`: whether the input is reduced as it
// lands (rhd) or received whole and then reduced (rd).
double foldUs(const CostParams& c, const PlanShape& s, double bytes, bool landed) {
  if (floorPow2(s.nranks) == s.nranks) return 0;
  return 2 * (message(c, pairLink(s, 1), bytes, nodeSenders(s, 1)) + c.stepUs) +
         (landed ? landedReduceUs(c, bytes) : reduceUs(c, bytes));
}

// With more ranks than cores, a synchronisation that waits for every rank costs the turns it
// takes each of them to get a core. Every schedule of all-gather, reduce-scatter, all-reduce
// and all-to-all waits for every rank one way or another, so that cost does not change their
// order; a rooted schedule along a chain or tree does not: its root (broadcast) or its leaves
// (reduce) hand their data on and return, and back-to-back calls overlap. So the direct
// broadcast and reduce, whose every rank waits for all the others twice per window, pay it.
// Measured, 4 ranks on 2 cores, 1 KiB, 2 runs (us per call, direct against binomial / chain /
// ring): broadcast 12-18 against 1.6-3.0, reduce 8-11 against 2.1-4.0; from 256 KiB level.
constexpr double kOversubscribedSyncUs = 5.0;
bool rooted(CollKind kind) {
  return kind == CollKind::kBroadcast || kind == CollKind::kReduce;
}

double direct(CollKind kind, double bytes, const PlanShape& s, const CostParams& c) {
  // With a device graph, direct's window reads would go between chips that no link joins
  // (they bypass the transports): the planner leaves it to TRNCCL_ALGO there.
  if (!s.allLocal || s.intra == LinkClass::kNeuronLink) return kNever;
  const int n = s.nranks;
  const double sync = c.syncUs + (s.oversubscribed && rooted(kind) ? kOversubscribedSyncUs : 0);
  const double perRank = kind == CollKind::kAllGather ? bytes / n : bytes;
  const double rounds = std::max(1.0, std::ceil(perRank / static_cast<double>(s.windowBytes)));
  // The single-copy forms (CMA, collectives/direct_rounds.hpp): two synchronisations, and each
  // byte of a rank's output copied once (a CMA read is modeled at the host's copy speed; an
  // all-to-all with a rank in place takes the windows instead, which this leaves out: the
  // planner's table is the same for every rank, and working in place is each rank's choice,
  // see Planner::agreesOnInPlace). All-to-all-v goes
  // by its largest block, which the model takes as the mean one.
  const bool toAll = kind == CollKind::kAllToAll || kind == CollKind::kAllToAllv;
  const double block = toAll ? bytes / n : perRank;
  const bool cma = (kind == CollKind::kAllGather || toAll || kind == CollKind::kBroadcast) &&
                   readsByCma(kind, static_cast<size_t>(block), s.cma, s.oversubscribed);
  if (cma) return 2 * sync + c.stepUs + copyUs(c, bytes);
  switch (kind) {
    case CollKind::kAllReduce:
      if (bytes <= static_cast<double>(s.llMaxBytes)) return sync + c.stepUs;
      if (bytes <= static_cast<double>(s.oneShotMaxBytes))
        return 2 * sync + c.stepUs + copyUs(c, bytes) + reduceUs(c, (n - 1) * bytes);
      // Staged: the parts other ranks reduce; this rank's own part is reduced from its input.
      return rounds * (3 * sync + c.stepUs) + copyUs(c, bytes * (n - 1) / n) +
             reduceUs(c, bytes * (n - 1) / n) + copyUs(c, bytes * (n - 1) / n);
    case CollKind::kAllGather:
      if (bytes / n <= static_cast<double>(s.llMaxBytes)) return sync + c.stepUs;
      return rounds * (2 * sync + c.stepUs) + copyUs(c, bytes / n) + copyUs(c, bytes * (n - 1) / n);
    case CollKind::kReduceScatter:
      // Tiny inputs go through the small-message lines, as the all-reduce's do.
      if (bytes <= static_cast<double>(s.llMaxBytes)) return sync + c.stepUs;
      return rounds * (2 * sync + c.stepUs) + copyUs(c, bytes * (n - 1) / n) +
             reduceUs(c, bytes * (n - 1) / n);
    case CollKind::kReduce:
      return rounds * (2 * sync + c.stepUs) + copyUs(c, bytes * (n - 1) / n) +
             reduceUs(c, (n - 1) * bytes);
    case CollKind::kBroadcast:
    case CollKind::kAllToAll:
    case CollKind::kAllToAllv: return rounds * (2 * sync + c.stepUs) + 2 * copyUs(c, bytes);
    case CollKind::kBarrier: return sync + c.stepUs;
    default: return kNever;
  }
}

double ringFamily(CollKind kind, double bytes, const PlanShape& s, const CostParams& c) {
  const int n = s.nranks;
  const LinkClass link = ringLink(s);
  switch (kind) {
    case CollKind::kAllReduce: return allReduceOverLevels(c, {{n, link, efaQueue(s, 1)}}, bytes);
    case CollKind::kAllGather: return overLevels(c, {{n, link, efaQueue(s, 1)}}, bytes, false);
    case CollKind::kReduceScatter: return overLevels(c, {{n, link, efaQueue(s, 1)}}, bytes, true);
    // The ring goes node by node: nodes - 1 of its hops cross nodes.
    case CollKind::kBroadcast: return chain(c, s, n, link, s.nodes - 1, bytes, false);
    case CollKind::kReduce: return chain(c, s, n, link, s.nodes - 1, bytes, true);
    case CollKind::kAllToAll:
    case CollKind::kAllToAllv: {
      double t = 0;  // pairwise: round i sends to the rank i after
      for (int i = 1; i < n; ++i)
        t += message(c, anyPairLink(s), bytes / n, nodeSenders(s, i)) + c.stepUs;
      return t;
    }
    case CollKind::kBarrier: return ceilLog2(n) * (message(c, anyPairLink(s), 0) + c.stepUs);
    default: return kNever;
  }
}

double recursiveDoubling(const PlanShape& s, const CostParams& c, double bytes) {
  const int p2 = floorPow2(s.nranks);
  double t = foldUs(c, s, bytes, false);
  // Each round receives the partner's whole partial, then reduces it with its own.
  for (int mask = 1; mask < p2; mask *= 2)
    t += message(c, pairLink(s, mask), bytes, nodeSenders(s, mask)) + c.stepUs + reduceUs(c, bytes);
  return t;
}

double rhd(const PlanShape& s, const CostParams& c, double bytes) {
  const int p2 = floorPow2(s.nranks);
  double t = foldUs(c, s, bytes, true), part = bytes;
  for (int mask = 1; mask < p2; mask *= 2) {
    part /= 2;
    // A halving round (with its reduction) and the doubling round that mirrors it.
    t += 2 * (message(c, pairLink(s, mask), part, nodeSenders(s, mask)) + c.stepUs) +
         landedReduceUs(c, part);
  }
  return t;
}

double bruck(const PlanShape& s, const CostParams& c, double bytes) {
  const int n = s.nranks;
  double t = 0;
  // Blocks lie in rank order and partners are rank +- d (not ring neighbours).
  for (int d = 1; d < n; d *= 2)
    t += message(c, anyPairLink(s), std::min(d, n - d) * bytes / n, nodeSenders(s, d)) + c.stepUs;
  return t;
}

// Two trees, each with half the buffer in window-sized chunks; a rank's link carries both
// trees' chunks at once. Up: each tree level adds two steps (two children, then the send);
// down: one.
double doubleTree(const PlanShape& s, const CostParams& c, double bytes) {
  const double half = bytes / 2, window = static_cast<double>(s.windowBytes);
  const double chunk = std::min(half, window);
  const double chunks = std::max(1.0, std::ceil(half / window));
  const int depth = ceilLog2(s.nranks);
  const double round = message(c, anyPairLink(s), 2 * chunk) + c.stepUs;
  return (chunks + 2 * depth) * round + 2 * chunks * landedReduceUs(c, chunk) +
         (chunks + depth) * round;
}

// Rotate, then per round pack the blocks with that bit, exchange, unpack; then put in place.
double bruckAllToAll(const PlanShape& s, const CostParams& c, double bytes) {
  const int n = s.nranks;
  double t = 2 * copyUs(c, bytes);
  for (int d = 1; d < n; d *= 2) {
    int blocks = 0;  // indices with this bit set: runs of d from d, 3d, 5d, ...
    for (int run = d; run < n; run += 2 * d) blocks += std::min(d, n - run);
    const double moved = bytes / n * blocks;
    t += message(c, anyPairLink(s), moved, nodeSenders(s, d)) + c.stepUs + 2 * copyUs(c, moved);
  }
  return t + n * c.stepUs;
}

double binomial(const PlanShape& s, const CostParams& c, double bytes, bool reduces) {
  double t = 0;
  // Rooted: a round's senders are the ranks that already hold the data (or a partial sum),
  // not every rank of every node, so the emulated nodes' efa queue (efaQueue) is not charged.
  for (int mask = 1; mask < s.nranks; mask *= 2)
    t += message(c, pairLink(s, mask), bytes, pairSenders(s, mask)) + c.stepUs +
         (reduces ? landedReduceUs(c, bytes) : 0);
  return t;
}

// What the grid all-gather and reduce-scatter (collectives/levels.hpp) add to their levels'
// messages: small blocks are staged through scratch in grid order (the whole buffer in and out
// once more); larger ones go where they lie in rank order, each part as one message per run of
// consecutive ranks (at level i up to the product of the outer levels' sizes). The own block's
// copy is left out, as it is for the ring and direct schedules, which make it too.
double gridExtrasUs(const CostParams& c, const std::vector<Level>& levels, double bytes,
                    int nranks) {
  if (gridStages(static_cast<size_t>(bytes / nranks))) return copyUs(c, bytes + bytes / nranks);
  double t = 0;
  for (size_t i = 0; i < levels.size(); ++i) {
    int runs = 1;
    for (size_t j = i + 1; j < levels.size(); ++j) runs *= levels[j].size;
    t += (levels[i].size - 1) * (runs - 1) * (message(c, levels[i].link, 0) + c.stepUs);
  }
  return t;
}

double hierarchical(CollKind kind, double bytes, const PlanShape& s, const CostParams& c,
                    int slices) {
  if (!s.hierarchicalFits) return kNever;
  const int k = s.perNode, nodes = s.nodes;
  // Across nodes every rank exchanges with its peers of the same local rank at once.
  const std::vector<Level> levels = {{k, s.intra}, {nodes, LinkClass::kEfa, efaQueue(s, k)}};
  // Uneven nodes: the ranks past the smallest node's size hand their input to an owner first
  // (and get the result back), or go through node leaders.
  const double uneven = s.uniform ? 0 : 2 * message(c, s.intra, bytes);
  switch (kind) {
    case CollKind::kAllReduce: return pipelinedAllReduce(c, levels, bytes, slices) + uneven;
    case CollKind::kAllGather:
      return overLevels(c, levels, bytes, false) + gridExtrasUs(c, levels, bytes, s.nranks) +
             uneven;
    case CollKind::kReduceScatter:
      return overLevels(c, levels, bytes, true) + gridExtrasUs(c, levels, bytes, s.nranks) + uneven;
    case CollKind::kBroadcast:
      return chain(c, s, nodes, LinkClass::kEfa, nodes - 1, bytes, false) +
             chain(c, s, s.nranks / nodes, s.intra, 0, bytes, false);
    case CollKind::kAllToAll:
    case CollKind::kAllToAllv: {
      // Blocks past TRNCCL_AGGREGATE_MAX_BYTES go straight to their ranks, all at once: as the
      // pairwise exchange moves them (all-to-all-v's blocks are taken as the mean one).
      if (bytes / s.nranks > static_cast<double>(s.aggregateMaxBytes))
        return ringFamily(kind, bytes, s, c);
      // Inside the node, directly; for each other node, one rank of the node gathers its
      // node's data for it, sends it over efa at once, and the receiver fans it out. The
      // nodes - 1 exchanges are shared among the k ranks.
      const double perNode = bytes / nodes;  // what one rank sends to one node
      const double rounds = std::ceil(static_cast<double>(nodes - 1) / k);
      return (k - 1) * (message(c, s.intra, bytes / s.nranks) + c.stepUs) +
             rounds *
                 (2 * (k - 1) * (message(c, s.intra, perNode) + c.stepUs) +
                  message(c, LinkClass::kEfa, k * perNode, efaQueue(s, std::min(k, nodes - 1))) +
                  c.stepUs);
    }
    default: return kNever;
  }
}

double torus(CollKind kind, double bytes, const PlanShape& s, const CostParams& c, int slices) {
  if (!s.torusFits) return kNever;
  std::vector<Level> levels;
  int inner = 1;  // ranks of a node: one ring across nodes per position of the inner levels
  for (size_t i = 0; i < s.torusDims.size(); ++i) {
    const bool across = static_cast<int>(i) == s.torusNodeLevel;
    levels.push_back(
        {s.torusDims[i], across ? LinkClass::kEfa : LinkClass::kNeuronLink, across ? inner : 1});
    inner *= s.torusDims[i];
  }
  switch (kind) {
    case CollKind::kAllReduce: return pipelinedAllReduce(c, levels, bytes, slices);
    case CollKind::kAllGather:
      return overLevels(c, levels, bytes, false) + gridExtrasUs(c, levels, bytes, s.nranks);
    case CollKind::kReduceScatter:
      return overLevels(c, levels, bytes, true) + gridExtrasUs(c, levels, bytes, s.nranks);
    default: return kNever;
  }
}

}  // namespace

double modeledUs(Algorithm algo, CollKind kind, size_t callBytes, const PlanShape& shape,
                 const CostParams& costs, int pipelineSlices) {
  const double bytes = static_cast<double>(callBytes);
  if (shape.nranks == 1) return costs.stepUs + copyUs(costs, bytes);
  switch (algo) {
    case Algorithm::kDirect: return direct(kind, bytes, shape, costs);
    case Algorithm::kRing: return ringFamily(kind, bytes, shape, costs);
    case Algorithm::kRecursiveDoubling:
      return kind == CollKind::kAllReduce ? recursiveDoubling(shape, costs, bytes) : kNever;
    case Algorithm::kRhd: return kind == CollKind::kAllReduce ? rhd(shape, costs, bytes) : kNever;
    case Algorithm::kTree:
      return kind == CollKind::kAllReduce ? doubleTree(shape, costs, bytes) : kNever;
    case Algorithm::kBruck:
      return kind == CollKind::kAllGather  ? bruck(shape, costs, bytes)
             : kind == CollKind::kAllToAll ? bruckAllToAll(shape, costs, bytes)
                                           : kNever;
    case Algorithm::kBinomial:
      return kind == CollKind::kBroadcast ? binomial(shape, costs, bytes, false)
             : kind == CollKind::kReduce  ? binomial(shape, costs, bytes, true)
                                          : kNever;
    case Algorithm::kHierarchical: return hierarchical(kind, bytes, shape, costs, pipelineSlices);
    case Algorithm::kTorus: return torus(kind, bytes, shape, costs, pipelineSlices);
    default: return kNever;
  }
}

bool runsInSlices(Algorithm algo, CollKind kind) {
  return kind == CollKind::kAllReduce &&
         (algo == Algorithm::kHierarchical || algo == Algorithm::kTorus);
}

PlanShape planShapeOf(const CommView& view) {
  PlanShape s;
  s.nranks = view.nranks;
  s.allLocal = view.allLocal;
  s.intra = view.deviceLinks ? LinkClass::kNeuronLink : LinkClass::kShm;
  s.windowBytes = view.windowBytes ? view.windowBytes : s.windowBytes;
  s.llMaxBytes = view.llMaxBytes;
  s.oneShotMaxBytes = view.oneShotMaxBytes;
  s.aggregateMaxBytes = view.aggregateMaxBytes;
  s.cma = view.cma;
  s.oversubscribed = view.oversubscribed;
  if (view.topology) {
    const topology::Topology& t = *view.topology;
    s.nodes = t.nnodes();
    s.perNode = t.nranks();
    int largest = 0;
    for (int node = 0; node < s.nodes; ++node) {
      const int size = static_cast<int>(t.ranksOfNode(node).size());
      s.perNode = std::min(s.perNode, size);
      largest = std::max(largest, size);
    }
    s.uniform = largest == s.perNode;
  } else if (!view.allLocal) {
    // Layout unknown (unit tests, benchmarks of the planner): every rank its own node.
    s.nodes = view.nranks;
    s.perNode = 1;
  }
  if (view.shapes) {
    s.hierarchicalFits = view.shapes->hierarchical.fits;
    s.torusFits = view.shapes->torus.fits;
    for (const RingGroup& level : view.shapes->torus.levels) s.torusDims.push_back(level.size());
    if (s.torusFits && s.nodes > 1) s.torusNodeLevel = static_cast<int>(s.torusDims.size()) - 1;
  }
  return s;
}

CostParams machineCosts() {
  CostParams c;
  // docs/PLANNER.md: fabric_bench and the perf tools on the development machine (2 cores).
  c.of(LinkClass::kSelf) = {0.2, 10.0};
  c.of(LinkClass::kShm) = {0.5, 3.0};
  c.of(LinkClass::kNeuronLink) = c.of(LinkClass::kShm);  // emulated over shm here
  c.of(LinkClass::kEfa) = {25.0, 2.0};
  // efa here is libfabric over loopback: every byte is the host kernel's copying on the same
  // cores, whichever ranks send it.
  c.efaShared = true;
  c.stepUs = 0.5;
  c.syncUs = 0.4;
  c.copyGBps = 8.0;
  c.reduceGBps = 8.0;
  // Measured per extra slice of the hierarchical all-reduce on 2 emulated nodes x 2 ranks (4
  // processes on 2 cores), 1-64 MiB: 100-210 us, about 53 of it the messages the model counts;
  // with 150 the model keeps 1 MiB whole, which measured fastest (docs/PLANNER.md).
  c.sliceUs = 150.0;
  c.origin = "this machine's defaults";
  return c;
}

CostParams hardwareCosts(const topology::DeviceGraph& graph) {
  CostParams c = machineCosts();
  double linkGBps = 0;
  for (const auto& link : graph.links)
    if (link.nodeA == link.nodeB && link.bandwidthGBps > 0)
      linkGBps = linkGBps == 0 ? link.bandwidthGBps : std::min(linkGBps, link.bandwidthGBps);
  if (linkGBps > 0) c.of(LinkClass::kNeuronLink) = {2.0, linkGBps};
  // Copies and reductions run on the chips' engines, not the host's cores.
  c.copyGBps = 100.0;
  c.reduceGBps = 100.0;
  // The stages run on different engines (NeuronLink DMA, the NICs): a slice costs its
  // messages and the host's posting of them (step_us), nothing the model does not count.
  c.sliceUs = 0;
  double nicGbps = 0;
  for (const auto& nic : graph.nics)
    if (nic.node == 0) nicGbps += nic.gbps;
  // One rank per chip: a chip's share of the node's NICs.
  const int chips = graph.devicesOnNode(0);
  if (nicGbps > 0 && chips > 0) c.of(LinkClass::kEfa) = {15.0, nicGbps / 8 / chips};
  c.efaShared = false;  // each chip's share of the NICs is its own (machineCosts: loopback)
  c.origin = graph.instance.empty() ? "the device graph's link and NIC figures"
                                    : graph.instance + " figures (docs/PLANNER.md)";
  return c;
}

namespace {

Result<LinkClass> linkClassFromName(const std::string& name) {
  for (int i = 0; i < kLinkClassCount; ++i)
    if (name == topology::linkClassName(static_cast<LinkClass>(i)))
      return static_cast<LinkClass>(i);
  return makeError(Code::kInvalidArgument, "unknown link class '%s' (self, neuronlink, shm, efa)",
                   name.c_str());
}

// A positive finite number, or an error naming the field.
Result<double> positive(const std::string& text, const char* field, bool zeroOk) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value) || value < 0 || (!zeroOk && value == 0))
    return makeError(Code::kInvalidArgument, "%s='%s' is not a %s number", field, text.c_str(),
                     zeroOk ? "non-negative" : "positive");
  return value;
}

}  // namespace

Result<CostParams> parseTuning(const std::string& text, const std::string& origin,
                               CostParams base) {
  std::istringstream in(text);
  std::string line;
  int lineNo = 0;
  bool header = false;
  auto fail = [&](const std::string& why) {
    return makeError(Code::kInvalidArgument, "%s line %d: %s", origin.c_str(), lineNo, why.c_str());
  };
  while (std::getline(in, line)) {
    ++lineNo;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string key;
    if (!(words >> key)) continue;
    if (!header) {
      std::string version;
      words >> version;
      if (key != "trnccl-tuning" || version != "1")
        return fail("expected the header 'trnccl-tuning 1', got '" + line + "'");
      header = true;
      continue;
    }
    std::vector<std::string> fields;
    for (std::string w; words >> w;) fields.push_back(w);
    if (key == "link") {
      if (fields.empty()) return fail("'link' needs a class (self, neuronlink, shm, efa)");
      auto link = linkClassFromName(fields[0]);
      if (!link.isOk()) return fail(link.status().message());
      LinkCost cost = base.of(link.value());
      for (size_t i = 1; i < fields.size(); ++i) {
        const size_t eq = fields[i].find('=');
        const std::string name = fields[i].substr(0, eq);
        const std::string value = eq == std::string::npos ? "" : fields[i].substr(eq + 1);
        if (name != "alpha_us" && name != "gbps")
          return fail("unknown field '" + name + "' (alpha_us, gbps)");
        auto number = positive(value, name.c_str(), name == "alpha_us");
        if (!number.isOk()) return fail(number.status().message());
        (name == "alpha_us" ? cost.alphaUs : cost.gbps) = number.value();
      }
      base.of(link.value()) = cost;
      continue;
    }
    if (key == "moe") {
      MoeTuning entry;
      entry.line = lineNo;
      for (const std::string& field : fields) {
        const size_t eq = field.find('=');
        const std::string name = field.substr(0, eq);
        const std::string value = eq == std::string::npos ? "" : field.substr(eq + 1);
        if (name == "mode") {
          if (value != "normal" && value != "low_latency" && value != "hierarchical")
            return fail("moe mode='" + value + "' is not normal, low_latency or hierarchical");
          entry.mode = value;
          continue;
        }
        int* small = name == "ranks"   ? &entry.ranks
                     : name == "nodes" ? &entry.nodes
                     : name == "topk"  ? &entry.topk
                                       : nullptr;
        long* large = name == "tokens"         ? &entry.tokens
                      : name == "hidden_bytes" ? &entry.hiddenBytes
                                               : nullptr;
        if (!small && !large)
          return fail("unknown moe field '" + name +
                      "' (ranks, nodes, tokens, mode, hidden_bytes, topk)");
        char* end = nullptr;
        const long number = std::strtol(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || number <= 0 || number >= (1L << 31))
          return fail("moe " + name + "='" + value + "' is not a positive integer");
        if (small)
          *small = static_cast<int>(number);
        else
          *large = number;
      }
      if (!entry.ranks || !entry.nodes || !entry.tokens || entry.mode.empty())
        return fail("a moe entry needs ranks=, nodes=, tokens= and mode=");
      if (entry.nodes > entry.ranks) return fail("moe nodes= is larger than ranks=");
      if (entry.mode == "hierarchical" && entry.nodes == 1)
        return fail("moe mode=hierarchical needs nodes= of 2 or more");
      for (const MoeTuning& earlier : base.moe)
        if (earlier.ranks == entry.ranks && earlier.nodes == entry.nodes &&
            earlier.tokens == entry.tokens && earlier.line > 0)
          return fail(
              strformat("a second moe entry for ranks=%d nodes=%d tokens=%ld (line %d "
                        "has one)",
                        entry.ranks, entry.nodes, entry.tokens, earlier.line));
      base.moe.push_back(entry);
      continue;
    }
    double* target = key == "step_us"       ? &base.stepUs
                     : key == "sync_us"     ? &base.syncUs
                     : key == "copy_gbps"   ? &base.copyGBps
                     : key == "reduce_gbps" ? &base.reduceGBps
                     : key == "slice_us"    ? &base.sliceUs
                                            : nullptr;
    if (!target)
      return fail("unknown key '" + key +
                  "' (link, step_us, sync_us, copy_gbps, reduce_gbps, slice_us, moe)");
    if (fields.size() != 1) return fail("'" + key + "' takes one number");
    auto number =
        positive(fields[0], key.c_str(), key == "step_us" || key == "sync_us" || key == "slice_us");
    if (!number.isOk()) return fail(number.status().message());
    *target = number.value();
  }
  if (!header)
    return makeError(Code::kInvalidArgument, "%s is empty (no 'trnccl-tuning 1' header)",
                     origin.c_str());
  base.origin = origin;
  return base;
}

std::string tuningText(const CostParams& c) {
  std::string text = "trnccl-tuning 1\n";
  for (int i = 0; i < kLinkClassCount; ++i)
    text += strformat("link %s alpha_us=%.3f gbps=%.3f\n",
                      topology::linkClassName(static_cast<LinkClass>(i)), c.link[i].alphaUs,
                      c.link[i].gbps);
  text += strformat("step_us %.3f\nsync_us %.3f\ncopy_gbps %.3f\nreduce_gbps %.3f\nslice_us %.3f\n",
                    c.stepUs, c.syncUs, c.copyGBps, c.reduceGBps, c.sliceUs);
  for (const MoeTuning& m : c.moe) {
    text += strformat("moe ranks=%d nodes=%d tokens=%ld mode=%s", m.ranks, m.nodes, m.tokens,
                      m.mode.c_str());
    if (m.hiddenBytes) text += strformat(" hidden_bytes=%ld", m.hiddenBytes);
    if (m.topk) text += strformat(" topk=%d", m.topk);
    text += "\n";
  }
  return text;
}

const MoeTuning* CostParams::moeEntry(int ranks, int nodes, long tokens) const {
  const MoeTuning* best = nullptr;
  double bestDistance = 0;
  for (const MoeTuning& m : moe) {
    if (m.ranks != ranks || m.nodes != nodes) continue;
    // Nearest in ratio; on a tie the larger measurement (a batch grows into it).
    const double distance = std::fabs(
        std::log(static_cast<double>(std::max(1L, tokens)) / static_cast<double>(m.tokens)));
    if (!best || distance < bestDistance || (distance == bestDistance && m.tokens > best->tokens)) {
      best = &m;
      bestDistance = distance;
    }
  }
  return best;
}

Result<CostParams> loadCosts(const topology::Discovery& found, const std::string& tuningPath) {
  CostParams base =
      found.kind == topology::Discovery::Kind::kSysfs ? hardwareCosts(found.graph) : machineCosts();
  if (tuningPath.empty()) return base;
  auto text = readTextFile(tuningPath);
  if (!text.isOk())
    return makeError(Code::kInvalidArgument,
                     "TRNCCL_TUNING_FILE: %s; write one with trnccl-tune or unset it",
                     text.status().message().c_str());
  return parseTuning(text.value(), "TRNCCL_TUNING_FILE=" + tuningPath, base);
}

}  // namespace trnccl
