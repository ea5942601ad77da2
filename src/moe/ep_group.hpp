// The MoE engine's state (the TokenSwitch contract: include/trnccl.h, docs/MOE.md): an
// expert-parallel group on a communicator, and the routing one step's top-k choice gives.
// A routing holds both sides of the exchange: as origin, which packed row goes to which rank
// and which of a token's top-k each row carries; as expert rank, where each source's rows land
// and which local experts each row is for. Dispatch and combine (dispatch.cpp, combine.cpp)
// are schedules planned from it, so they move bytes without exchanging counts again.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm.hpp"
#include "core/copy.hpp"
#include "core/uninitialized_vector.hpp"
#include "transports/shm/shared_alloc.hpp"
#include "trnccl.h"

namespace trnccl::moe {

// Entry i of the caller's top-k ids, int32 or int64 (checked at routing creation).
inline int64_t expertIdAt(const void* idx, trncclDataType_t type, size_t i) {
  return type == trncclInt32 ? static_cast<const int32_t*>(idx)[i]
                             : static_cast<const int64_t*>(idx)[i];
}

struct EpConfig {
  int numExperts = 0;
  int maxDispatchTokens = 0;
  int maxRecvTokens = 0;
  size_t maxTokenBytes = 0;
  trncclDataType_t payload = trncclBfloat16;
  trncclEpMode_t mode = trncclEpModeAuto;
  bool fp8() const { return payload == trncclFloat8e4m3 || payload == trncclFloat8e5m2; }
  // What combine sums: the payload, or bf16 for fp8 groups (experts compute in higher
  // precision, and fp8 sums would lose what the per-token scales keep).
  trncclDataType_t combineType() const { return fp8() ? trncclBfloat16 : payload; }
};

// Auto mode picks low latency up to this many tokens per rank (decode-sized batches).
inline constexpr int kLowLatencyMaxTokens = 128;

// Buffers reused across calls (operations on one communicator run one at a time, and the
// engine fills them only when its operation is at the head of the queue).
struct Staging {
  // Byte buffers are resized per call without zeroing (every byte is written before it is
  // sent or read); the weights stay zeroed vectors.
  UninitializedVector<char> sendRows;  // dispatch: packed rows for peers; combine: expert side
  std::vector<float> sendWeights;
  UninitializedVector<char> recvRows;  // dispatch (expert-major): rows before the scatter to
                                       // slots; combine: the rows coming back, in packed order
  std::vector<float> recvWeights;
  std::vector<uint64_t> stagedToken;  // direct dispatch: each token's place in staging
  std::vector<float> accumulator;     // one token's fp32 sum
  std::vector<char> metaOut, metaIn;  // low latency: per peer, count + ids + weights
  UninitializedVector<char> hop1Out, hop1In, hop2Out, hop2In;  // hierarchical: each hop's
                                                               // messages
  UninitializedVector<char> partial;                           // hierarchical combine: proxy sums
  UninitializedVector<char> scaledIn, scaledOut;  // scaled (fp8) dispatch: rows with their scale
  // Direct mode: what local peers read (direct.cpp), two buffers used in turn by the group's
  // exchanges, so that an exchange need not wait for its peers' reads before it returns.
  shm::SharedBuffer shared[2];
  uint64_t peersMapped[2] = {0, 0};  // the allocation (region id) of each every peer has mapped
  int nextShared = 0;
  int takeShared() {
    const int i = nextShared;
    nextShared ^= 1;
    return i;
  }
};

struct EpGroup {
  std::shared_ptr<Communicator> comm;
  EpConfig config;
  int localExperts = 0;     // L = numExperts / nranks
  bool lowLatency = false;  // the mode auto resolved to (or was asked for)
  bool hierarchical = false;
  // Every rank shares this node's memory and maps its peers' staging (TRNCCL_MOE_DIRECT):
  // normal-mode dispatch and combine read rows where peers staged them (direct.cpp).
  bool direct = false;
  // Every rank maps the memory of its node's ranks (TRNCCL_MOE_DIRECT, TRNCCL_CMA): the
  // hierarchical mode's second hop reads rows where the node's proxy holds them.
  bool nodeDirect = false;
  std::shared_ptr<Staging> staging = std::make_shared<Staging>();
  int rank() const { return comm->rank(); }
  int nranks() const { return comm->nranks(); }
};

// The hierarchical mode's two hops (hierarchical.cpp): a token crosses to another node once,
// to this rank's proxy there (the rank at the same local position), which forwards it to the
// ranks of its node that hold its experts; combine comes back the same way, summed at the
// proxy. Rows a rank forwards for its own node start at itself (it is its own proxy there).
struct HierarchicalLayout {
  std::vector<int> nodeRanks;  // the ranks of this rank's node, ascending
  int nodeIndex = 0;           // this rank's position in nodeRanks
  // Origin: hop-1 rows, one per (token, other node holding one of its experts), by node.
  std::vector<int> proxyOfNode;     // nodes: where this rank's rows for each node go
  std::vector<size_t> hop1Begin;    // nodes + 1
  std::vector<uint32_t> hop1Token;  // token of each hop-1 row
  std::vector<int32_t> hop1Ids;     // hop-1 rows x topk: global ids on that node, else -1
  // Per own token, the rows whose results combine sums, by node: a hop-1 row (>= 0), or
  // -(1 + proxy row) for this rank's own node.
  std::vector<size_t> tokenPartBegin;
  std::vector<int64_t> tokenParts;
  // Proxy: the origins of other nodes it serves and their hop-1 rows (staging order).
  std::vector<int> hop1From;
  std::vector<size_t> hop1InBegin;
  std::vector<int32_t> hop1InIds;  // received hop-1 rows x topk global ids
  // Proxy rows: own tokens with an expert on this node and served hop-1 rows, by origin, then
  // in the origin's order. source: token index (own) or hop-1 staging row.
  std::vector<int> proxyOrigin;
  std::vector<uint32_t> proxySource;
  // Hop 2: proxy rows to each rank of the node (nodeRanks order), in proxy-row order.
  std::vector<size_t> hop2Begin;
  std::vector<uint32_t> hop2Row;  // the proxy row of each hop-2 row
  std::vector<int16_t> hop2K;     // hop-2 rows x topk: which k each receiver-local id is
  std::vector<int32_t> hop2Ids;   // hop-2 rows x topk: receiver-local ids ascending, -1
  // Each proxy row's hop-2 rows, by receiver (combine sums them in this order).
  std::vector<size_t> proxyRowBegin;
  std::vector<uint32_t> proxyRowHop2;
  // Receiver: rows from each proxy of the node (nodeRanks order) and their flat row.
  std::vector<size_t> hop2InBegin;
  std::vector<size_t> finalRow;
};

struct Routing {
  std::shared_ptr<EpGroup> group;
  trncclEpLayout_t layout = trncclEpLayoutFlat;
  size_t numTokens = 0;
  int topk = 0;

  // Origin side. Packed rows: one per (token, destination rank), grouped by destination in
  // rank order, then by token.
  std::vector<size_t> sendBegin;    // nranks + 1: rows to rank q are [sendBegin[q], [q+1])
  std::vector<uint32_t> rowToken;   // token of each packed row
  std::vector<int16_t> rowK;        // rows x topk: which top-k entry each local id came from
  std::vector<size_t> tokenBegin;   // numTokens + 1: token t's rows, ascending destination
  std::vector<uint32_t> tokenRows;  // packed row indices
  std::vector<int32_t> sendIds;     // rows x topk: each packed row's local ids at its rank

  // Low latency: the expert side below is filled by the first dispatch (expertSideReady), and
  // outputs must hold lowLatencyCapacity rows or slots (the worst case).
  bool lowLatency = false;
  bool hierarchical = false;
  HierarchicalLayout hier;
  bool expertSideReady = false;
  // Set when a dispatch with this routing is queued: a combine queued after it may rely on
  // what that dispatch learns (low latency) or keeps (the weights).
  std::atomic<bool> dispatchQueued{false};
  size_t lowLatencyCapacity = 0;

  // Expert side. Rows from source q: [recvBegin[q], recvBegin[q + 1]) in the flat order.
  std::vector<size_t> recvBegin;
  std::vector<int32_t> recvIds;    // rows x topk local expert ids, ascending, then -1
  std::vector<int32_t> perExpert;  // L: (token, expert) pairs received per local expert
  // Expert-major: the slot of every recvIds entry (-1 where the id is -1); zones in expert
  // order, each by source rank then token.
  std::vector<int64_t> slotOf;
  std::vector<float> slotWeights;  // the last dispatch's weight per slot (weighted combine)

  size_t recvRows() const { return recvBegin.back(); }
  size_t recvSlots() const;
  // Rows (flat) or slots (expert-major): what the caller's outputs must hold.
  size_t received() const { return layout == trncclEpLayoutFlat ? recvRows() : recvSlots(); }
  size_t sendRows(int q) const { return sendBegin[q + 1] - sendBegin[q]; }
  size_t recvRowsFrom(int q) const { return recvBegin[q + 1] - recvBegin[q]; }
};

// The expert side's per-expert counts and zones from recvBegin and recvIds (routing.cpp).
void buildExpertSide(Routing* routing);

// Hierarchical routing after the header exchange (hierarchical.cpp): idx are the caller's
// top-k ids; header[q * width + word] every rank's header, whose rows per node start at
// nodeWord. Builds both hops and the expert side.
Status buildHierarchical(const EpGroup& g, Routing* routing, const void* idx,
                         trncclDataType_t idxType, const std::vector<uint64_t>& header,
                         size_t width, size_t nodeWord);

// Checks the configuration (same on every rank: a collective) and builds the group.
Result<std::shared_ptr<EpGroup>> createGroup(std::shared_ptr<Communicator> comm,
                                             const EpConfig& config);

// The layout step and the count/id exchange (routing.cpp). idx is numTokens x topk of int32 or
// int64. A bad argument on any rank fails the call on every rank.
Result<std::shared_ptr<Routing>> createRouting(std::shared_ptr<EpGroup> group, const void* idx,
                                               trncclDataType_t idxType, size_t numTokens, int topk,
                                               trncclEpLayout_t layout);

struct DispatchArgs {
  const void* tokens = nullptr;
  size_t hidden = 0;
  const float* weights = nullptr;  // nullptr: every weight 1
  void* outTokens = nullptr;
  float* outWeights = nullptr;
  int64_t* outIdx = nullptr;
  size_t outCapacity = 0;
  // Scaled (fp8) dispatch: one scale per token in, one per row or slot out. The plan moves
  // each row with its scale appended (staging scaledIn/scaledOut) and splits them at the end.
  bool scaled = false;
  const float* tokenScales = nullptr;
  float* outScales = nullptr;
  // Set by planDispatch: the bytes a row occupies on the wire (hidden elements, + the scale),
  // and the caller's outTokens while outTokens points at scaledOut (flat; expert-major rows
  // are split into the caller's buffers as they land in their slots).
  size_t rowBytes = 0;
  void* callerOutTokens = nullptr;
  bool landed = false;  // flat rows already split into the caller's buffers (direct mode)
};
struct CombineArgs {
  const void* expertTokens = nullptr;
  size_t hidden = 0;
  void* out = nullptr;
  bool weighted = false;
};

// hidden within the group's maxTokenBytes (dispatch.cpp).
Status checkRowBytes(const Routing& routing, size_t hidden, const char* fn);
// Argument checks done before anything is queued (every buffer bound, before any byte moves).
Status checkDispatch(const Routing& routing, const DispatchArgs& a);
Status checkCombine(const Routing& routing, const CombineArgs& a);
// The schedules (dispatch.cpp, combine.cpp).
Status planDispatch(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                    const DispatchArgs& a);
Status planCombine(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                   const CombineArgs& a);
// Pieces the modes share: dispatch's last step (the layout's outputs from rows and weights in
// place, dispatch.cpp); combine's sums (combine.cpp): dst = srcs[0] + ... in fp32, rounded
// once; and the expert side's rows in the flat order (expert-major: each row's slots summed,
// weighted if asked, into staging).
Status finishDispatch(Routing& rt, const DispatchArgs& args, size_t rowBytes);
// The same with the rows of each source q != this rank at rowsFrom[q] (contiguous, flat order).
Status finishDispatch(Routing& rt, const DispatchArgs& args, size_t rowBytes,
                      const char* const* rowsFrom);
// Expert-major only: the same with received row j (flat order) at rowOf[j].
Status finishDispatchRows(Routing& rt, const DispatchArgs& args, const char* const* rowOf);
// Row j of the caller's output (a row or a slot) from a wire row: split into payload and scale
// for a scaled dispatch (payloadBytes: the payload's bytes per row).
void landRow(const DispatchArgs& a, size_t payloadBytes, size_t j, const char* row,
             CopyKind kind = CopyKind::kCached);
// Dispatch's packing: rows for peers (rows + p * rowBytes for packed row p; this rank's own
// rows are left out; rows = nullptr: none) and every packed row's weights (weights + p * topk).
void packRows(const Routing& rt, const DispatchArgs& a, size_t rowBytes, char* rows,
              float* weights);
// Expert-major combine's rows in flat order: row j = its slots summed (weighted if asked),
// except the rows of origin skipOrigin (-1: none).
void sumSlots(const Routing& rt, const CombineArgs& a, size_t rowBytes, char* rowsOut,
              int skipOrigin);
// The same with row i of rowsOut = received row order[i] (flat order index).
void sumSlotsInOrder(const Routing& rt, const CombineArgs& a, size_t rowBytes, char* rowsOut,
                     const std::vector<size_t>& order);
// One such row: dst = the slots slotOf[0..K) (-1 ends them) of slotsBase summed, each times
// slotWeights[slot] (nullptr: unweighted). Every path computes rows with it, so all give the
// same bits. acc: hidden floats; srcs: K pointers (scratch).
void sumRowSlots(trncclDataType_t type, void* dst, const char* slotsBase, const int64_t* slotOf,
                 int K, const float* slotWeights, size_t hidden, size_t rowBytes, float* acc,
                 const void** srcs);
// Reads ahead the slots of one row.
void prefetchSlots(const char* slotsBase, const int64_t* slotOf, int K, size_t rowBytes);
void sumRows(trncclDataType_t type, void* dst, const void* const* srcs, int n, size_t hidden,
             size_t rowBytes);
const char* expertRowsInFlatOrder(const Routing& rt, const CombineArgs& a, size_t rowBytes,
                                  Staging& st);
// Direct mode (direct.cpp): one node, peers read each other's mapped staging.
// The direct mode's synchronisation around a staging buffer the node's ranks map (direct.cpp
// says how it keeps each buffer until its readers are done); the hierarchical mode's mapped
// second hop uses it too.
void exchangeStaging(ScheduleBuilder& b, CollKind kind, const EpGroup& g, int which, size_t hidden,
                     trncclDataType_t type, bool holdUntilRead,
                     std::function<Status(ScheduleBuilder&)> read);
Status planDispatchDirect(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                          const DispatchArgs& a);
Status planCombineDirect(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                         const CombineArgs& a);
Status planDispatchHierarchical(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                                const DispatchArgs& a);
Status planCombineHierarchical(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                               const CombineArgs& a);

}  // namespace trnccl::moe
