// What every algorithm sees: the call's arguments and a view of the communicator (ranks,
// shared windows). An algorithm turns them into a schedule; it never names a transport.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/coll_kind.hpp"
#include "engine/schedule.hpp"
#include "topology/topology.hpp"
#include "trnccl.h"

namespace trnccl {

struct CollArgs {
  CollKind kind = CollKind::kAllReduce;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;  // per the C API's meaning for the call
  trncclDataType_t dtype = trncclUint8;
  trncclRedOp_t op = trncclSum;
  int root = -1;
  int peer = -1;
  bool isSend = false;  // kSendRecv
  // kAllToAllv, in elements
  std::vector<size_t> sendcounts, sdispls, recvcounts, rdispls;
};

// A ring over a group of ranks in a chosen order (collectives/ring_group.hpp has its phases).
struct RingGroup {
  std::vector<int> ranks;  // global ranks in ring order
  int pos = 0;             // this rank's index in ranks
  int size() const { return static_cast<int>(ranks.size()); }
  int at(int position) const { return ranks[((position % size()) + size()) % size()]; }
  int next() const { return at(pos + 1); }
  int prev() const { return at(pos - 1); }
  // Where rank sits in the ring (size() when it is not in it).
  int positionOf(int rank) const;
  // The group of `order` (which must contain rank).
  static RingGroup of(std::vector<int> order, int rank);
};

// The blocks (bytes one rank reads from one peer) that direct schedules read by CMA:
// [minBytes, maxBytes). minBytes SIZE_MAX: CMA is off on this node; maxBytes comes from
// TRNCCL_CMA_MAX_BYTES or init's timing of the kernel's copy (shm::kernelCopySlowdown).
struct CmaBand {
  size_t minBytes = SIZE_MAX;
  size_t maxBytes = SIZE_MAX;
  // The limit for broadcast: 0 (never) where init timed a slow kernel copy
  // (shm::broadcastCmaMaxBytes), else maxBytes.
  size_t broadcastMaxBytes = SIZE_MAX;
};

// The band from what a node's segment creator decided at init (its SegmentParams: the smallest
// and largest block, and the kernel's copy timed in permille of memcpy's time, 0 if not timed).
CmaBand cmaBand(uint64_t minBytes, uint64_t maxBytes, uint64_t kernelCopyPermille);

// Whether a direct schedule of `kind` reads a block of `block` bytes by CMA. More ranks than
// cores: the single-copy all-gather and broadcast end with every rank waiting for all readers,
// a scheduling round each; measured at 4 ranks on 2 cores they were 10-80% slower than the
// windows from 64 KiB to 4 MiB (all-to-all was 25-35% faster), so there they start at 4 MiB.
inline bool readsByCma(CollKind kind, size_t block, const CmaBand& band, bool oversubscribed) {
  constexpr size_t kOversubscribedMinBytes = 4 << 20;
  size_t minBytes = band.minBytes;
  if (oversubscribed && (kind == CollKind::kAllGather || kind == CollKind::kBroadcast))
    minBytes = std::max(minBytes, kOversubscribedMinBytes);
  const size_t maxBytes = kind == CollKind::kBroadcast ? band.broadcastMaxBytes : band.maxBytes;
  return block >= minBytes && block < maxBytes;
}

struct CommView {
  int rank = 0;
  int nranks = 1;
  bool allLocal = true;      // every rank shares this node's segment
  bool deviceLinks = false;  // some peer is reached over NeuronLink (a device graph is in use)
  int pipelineChunks = 0;    // TRNCCL_PIPELINE_CHUNKS (0 = the planner's choice)
  shm::Segment* segment = nullptr;
  size_t windowBytes = 0;  // per window slot
  size_t oneShotMaxBytes = 0;
  size_t aggregateMaxBytes = 16 << 10;  // TRNCCL_AGGREGATE_MAX_BYTES
  size_t llMaxBytes = 0;                // small-message lines (at most shm::kLLMaxBytes)
  // The blocks direct schedules read from peers' user buffers with CMA instead of staging
  // them in windows.
  CmaBand cma;
  bool oversubscribed = false;  // more ranks on this machine than it has cores
  bool readsByCma(CollKind kind, size_t block) const {
    return trnccl::readsByCma(kind, block, cma, oversubscribed);
  }
  // Whether ranks of this node may read each other's memory at all (CMA, or mapping a peer's
  // trncclMemAlloc allocation through /proc, which needs the same permission), whatever the
  // band.
  bool mapsPeerMemory() const { return cma.minBytes != SIZE_MAX; }
  char* window(int rank, int slot) const { return segment->window(rank, slot); }
  // Every rank in the order whole-communicator rings take: node by node, each node along its
  // NeuronLinks when it has a device graph (Topology::ringOrder), else rank order.
  RingGroup ring;
  // The job's topology (never null once the communicator is built) and the groups the
  // topology-shaped algorithms use (collectives/shapes.hpp), computed once at init.
  const topology::Topology* topology = nullptr;
  const struct Shapes* shapes = nullptr;
};

// The algorithms (collectives/registry.cpp names and describes them, and says which
// collectives each has a schedule for).
enum class Algorithm {
  kRing,
  kDirect,
  kHierarchical,
  kTorus,
  kRecursiveDoubling,
  kRhd,
  kTree,
  kBruck,
  kBinomial,
  kCount
};

// A schedule builder: every algorithm below, for the collectives it implements.
using BuildFn = Status (*)(ScheduleBuilder&, const CollArgs&, const CommView&);

// Ring family (works over any transport): ring, chain and pairwise schedules.
Status allReduceRing(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
// Forms with log2(p) depth (any transport, any rank count): recursive doubling (whole-buffer
// exchanges); Rabenseifner's halving/doubling; the double binary tree; Bruck's all-gather and
// all-to-all; binomial trees rooted anywhere.
Status allReduceRecursiveDoubling(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status allReduceRhd(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status allReduceTree(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status allToAllBruck(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status allGatherBruck(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status broadcastBinomial(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status reduceBinomial(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
// The planner's default for ring-family all-reduces of at most this many bytes is recursive
// doubling: over efa (tcp;ofi_rxm, 2 and 4 ranks) it beat the ring at every size measured up to
// 512 KiB but 32 KiB; the limit stays below that, since its bytes grow with log2(p) where the
// ring's stay near 2x.
inline constexpr size_t kRecursiveDoublingMaxBytes = 256 << 10;
Status allGatherRing(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status reduceScatterRing(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status broadcastChain(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status reduceChain(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status allToAllPairwise(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status barrierDissemination(ScheduleBuilder& b, const CollArgs& a, const CommView& c);

// Direct family (every rank on one node): ranks read each other's shared windows.
Status allReduceDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status allGatherDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status reduceScatterDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status broadcastDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status reduceDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status allToAllDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
// A uniform all-to-all on one node whose form depends on whether a rank works in place, which
// each rank decides alone: every rank publishes its descriptor (saying so) and waits for all of
// them; then all take the windows (which stage an in-place input a round at a time) when any
// rank works in place, else `outOfPlace` (a schedule builder for the rest of the call, run
// after the descriptors are exchanged; the call's descriptor is published).
void allToAllAgreeingOnInPlace(ScheduleBuilder& b, const CollArgs& a, const CommView& c,
                               BuildFn outOfPlace);
Status barrierDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c);

// Topology-shaped (collectives/shapes.hpp says when each fits; the planner falls back to the
// ring family otherwise): hierarchical = inside each node along its links, then between nodes
// among the ranks at the same position, then inside each node again; torus = one ring per
// torus dimension (and one across nodes).
Status allReduceHierarchical(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status allGatherHierarchical(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status reduceScatterHierarchical(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status broadcastHierarchical(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
// The hierarchical all-to-all(v): node-aggregated (one message per node pair crosses efa).
Status allToAllNodeAggregated(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
// All-to-all calls of at most this many bytes per rank (the whole send buffer) go
// node-aggregated by default across nodes; larger ones pairwise, where every rank's own
// messages cross efa in parallel instead of one port's. All-to-all-v across nodes always goes
// node-aggregated (ranks' sizes differ, and every rank must choose alike).
inline constexpr size_t kNodeAggregatedMaxBytes = 256 << 10;
Status allReduceTorus(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status allGatherTorus(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
Status reduceScatterTorus(ScheduleBuilder& b, const CollArgs& a, const CommView& c);

// Point-to-point: one send or receive step (fused into one concurrent group by GroupEnd).
Status sendRecvP2p(ScheduleBuilder& b, const CollArgs& a, const CommView& c);

// Helpers shared by the algorithms.
size_t elementSize(const CollArgs& a);
// Splits count elements into n nearly equal parts; part i is [begin(i), begin(i+1)).
inline size_t partBegin(size_t count, int n, int i) {
  return count * i / n;
}
// Descriptor of a call, published before the first post so peers can check it.
shm::OpDescriptor describe(const CollArgs& a);

}  // namespace trnccl
