// The pieces both forms of the hierarchical mode share (hierarchical.cpp moves hop 2 over the
// transports, hierarchical_mapped.cpp through staging the node's ranks map): hop 1 across
// nodes, the proxy's sums and the origin's sums.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "moe/ep_group.hpp"

namespace trnccl::moe {

// Message layout of both hops: a peer's rows, then their weights (topk floats each) from the
// next multiple of 4 bytes, so the floats are aligned whatever the row size (an odd hidden of
// a 2-byte type, an fp8 row) and so is the next message.
inline size_t rowsBytes(size_t rows, size_t rowBytes) {
  return (rows * rowBytes + alignof(float) - 1) / alignof(float) * alignof(float);
}
inline size_t messageBytes(size_t rows, size_t rowBytes, int K) {
  return rowsBytes(rows, rowBytes) + rows * K * sizeof(float);
}
template <typename Byte>
Byte* weightsOf(Byte* msg, size_t rows, size_t rowBytes) {
  return msg + rowsBytes(rows, rowBytes);
}

// Hop 1, dispatch: this rank's rows and their top-k weights packed for each other node's
// proxy (into st.hop1Out), sent, and the served origins' messages received at inBase + inAt[i]
// (inAt from hop1InOffsets).
void sendHop1(ScheduleBuilder& b, const Routing& rt, const DispatchArgs& a, char* inBase,
              const std::vector<size_t>& inAt);
// Where each served origin's hop-1 message starts (served origins + 1 offsets).
std::vector<size_t> hop1InOffsets(const HierarchicalLayout& h, size_t rowBytes, int K);
// For each received hop-1 row, the index of the served origin that sent it.
std::vector<size_t> servedIndexOf(const HierarchicalLayout& h);

// A hop-2 row's weights, in its receiver's order (the receiver's local ids ascending).
inline void hop2Weights(const HierarchicalLayout& h, size_t hr, int K, const float* topk,
                        float* out) {
  for (int j = 0; j < K; ++j) {
    const int k = h.hop2K[hr * K + j];
    out[j] = k < 0 ? 0.0f : (topk ? topk[k] : 1.0f);
  }
}

// Combine at the proxy: each proxy row's results summed (by ascending receiver) into
// st.partial, resultOf(x) giving hop-2 row x's result.
void sumProxyRows(const Routing& rt, size_t hidden, size_t rowBytes,
                  const std::function<const char*(size_t)>& resultOf);
// Combine, hop 1 back: the served origins' sums from st.partial to them, and this rank's rows
// from every other node into st.recvRows (sized by the caller).
void sendHop1Back(ScheduleBuilder& b, const Routing& rt, size_t rowBytes);
// Combine at the origin: each token's parts (its nodes' rows, ascending node) into out.
void sumTokenParts(const Routing& rt, const CombineArgs& a, size_t rowBytes);

// The same with hop 2 through staging the node's ranks map (EpGroup::nodeDirect).
Status planDispatchHierarchicalMapped(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                                      const DispatchArgs& a);
Status planCombineHierarchicalMapped(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                                     const CombineArgs& a);

}  // namespace trnccl::moe
