// The MoE engine's state (the TokenSwitch contract: include/trnccl.h, docs/MOE.md): an
// expert-parallel group on a communicator, and the routing one step's top-k choice gives.
// A routing holds both sides of the exchange: as origin, which packed row goes to which rank
// and which of a token's top-k each row carries; as expert rank, where each source's rows land
// and which local experts each row is for. Dispatch and combine (dispatch.cpp, combine.cpp)
// are schedules planned from it, so they move bytes without exchanging counts again.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm.hpp"
#include "trnccl.h"

namespace trnccl::moe {

struct EpConfig {
  int numExperts = 0;
  int maxDispatchTokens = 0;
  int maxRecvTokens = 0;
  size_t maxTokenBytes = 0;
  trncclDataType_t payload = trncclBfloat16;
};

// Buffers reused across calls (operations on one communicator run one at a time, and the
// engine fills them only when its operation is at the head of the queue).
struct Staging {
  std::vector<char> sendRows;  // dispatch: packed rows for peers; combine: expert side rows
  std::vector<float> sendWeights;
  std::vector<char> recvRows;  // dispatch (expert-major): rows before the scatter to slots;
                               // combine: the rows coming back, in packed order
  std::vector<float> recvWeights;
  std::vector<float> accumulator;  // one token's fp32 sum
};

struct EpGroup {
  std::shared_ptr<Communicator> comm;
  EpConfig config;
  int localExperts = 0;  // L = numExperts / nranks
  std::shared_ptr<Staging> staging = std::make_shared<Staging>();
  int rank() const { return comm->rank(); }
  int nranks() const { return comm->nranks(); }
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
};
struct CombineArgs {
  const void* expertTokens = nullptr;
  size_t hidden = 0;
  void* out = nullptr;
  bool weighted = false;
};

// Argument checks done before anything is queued (every buffer bound, before any byte moves).
Status checkDispatch(const Routing& routing, const DispatchArgs& a);
Status checkCombine(const Routing& routing, const CombineArgs& a);
// The schedules (dispatch.cpp, combine.cpp).
Status planDispatch(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                    const DispatchArgs& a);
Status planCombine(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                   const CombineArgs& a);

}  // namespace trnccl::moe
