// What every algorithm sees: the call's arguments and a view of the communicator (ranks,
// shared windows). An algorithm turns them into a schedule; it never names a transport.
#pragma once

#include <string>
#include <vector>

#include "engine/coll_kind.hpp"
#include "engine/schedule.hpp"
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

struct CommView {
  int rank = 0;
  int nranks = 1;
  bool allLocal = true;  // every rank shares this node's segment
  shm::Segment* segment = nullptr;
  size_t windowBytes = 0;  // per window slot
  size_t oneShotMaxBytes = 0;
  size_t llMaxBytes = 0;  // small-message lines (at most shm::kLLMaxBytes)
  char* window(int rank, int slot) const { return segment->window(rank, slot); }
};

enum class Algorithm { kRing, kDirect };
const char* algorithmName(Algorithm algo);

// Ring family (works over any transport): ring, chain and pairwise schedules.
Status allReduceRing(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
// allReduceRing's form for calls of at most kRecursiveDoublingMaxBytes: log2(p) rounds of
// whole-buffer exchanges. Over efa (tcp;ofi_rxm, 2 and 4 ranks) it beat the ring at every size
// measured up to 512 KiB but 32 KiB; the limit stays below that, since its bytes grow with
// log2(p) where the ring's stay near 2x.
Status allReduceRecursiveDoubling(ScheduleBuilder& b, const CollArgs& a, const CommView& c);
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
Status barrierDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c);

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
