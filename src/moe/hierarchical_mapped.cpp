// The hierarchical mode with hop 2 through staging the node's ranks map (EpGroup::nodeDirect),
// as the direct mode does on one node. Dispatch: the proxy receives hop 1 straight into its
// staging, copies there only the rows of its own tokens that other ranks of the node need, and
// writes a table (each hop-2 row's place and its weights); every rank of the node then copies
// its rows out of its proxies' staging into its output or expert slots. Over the transports
// the same rows would be packed into a message, copied into a ring slot and out of it first.
// Combine: every rank makes the rows for each proxy in its staging and each proxy sums them
// where they lie. The synchronisation is the direct mode's (exchangeStaging): a post once
// the staging is complete, a wait for every rank of the node, the reads, a post that they are
// done; the group's two staging buffers, used in turn by every exchange, keep a buffer
// unchanged until the node's ranks have read it. Only the node's ranks take part: the
// counters live in the node's segment.
#include <algorithm>
#include <cstring>
#include <new>

#include "collectives/algorithm.hpp"
#include "core/dtype.hpp"
#include "moe/hierarchical_hops.hpp"
#include "transports/shm/segment.hpp"

namespace trnccl::moe {
namespace {

// The start of every rank's staging in this form; begin[positions + 1] follows it: the hop-2
// rows for each position of the node (dispatch: in the proxy's order; combine: the rows made
// for each proxy).
struct HopStagingHeader {
  uint64_t positions = 0;
  uint64_t tableOffset = 0;    // dispatch: each hop-2 row's byte offset in this staging
  uint64_t weightsOffset = 0;  // dispatch: each hop-2 row's weights (topk floats)
  uint64_t rowsOffset = 0;     // combine: the rows made for the proxies
};

size_t headerBytes(size_t positions) {
  return shm::alignUp(sizeof(HopStagingHeader) + ((positions + 1) * sizeof(uint64_t)), 64);
}

// Takes the group's next staging buffer, sized to `bytes`, and writes its header: the offsets
// given, the positions and each position's rows (begin).
Status startStaging(Staging& st, size_t bytes, HopStagingHeader header,
                    const std::vector<size_t>& begin, int* which, char** staging) {
  *which = st.takeShared();
  TRNCCL_RETURN_IF_ERROR(st.shared[*which].reserve(bytes));
  *staging = st.shared[*which].data();
  header.positions = begin.size() - 1;
  new (*staging) HopStagingHeader(header);
  auto* words = reinterpret_cast<uint64_t*>(*staging + sizeof(HopStagingHeader));
  for (size_t i = 0; i < begin.size(); ++i) words[i] = begin[i];
  return Status::ok();
}

// A node rank's staging as this rank reads it, with the range of rows it holds for this
// rank's position, checked against what this rank's routing expects.
struct NodeStaging {
  const char* base = nullptr;
  size_t bytes = 0;
  HopStagingHeader header;
  uint64_t first = 0;
  bool holds(uint64_t offset, size_t length) const {
    return offset >= headerBytes(header.positions) && offset + length <= bytes;
  }
};

Result<NodeStaging> nodeStaging(const ScheduleBuilder& b, const Routing& rt, int position,
                                const char* ownStaging, size_t ownBytes, size_t expectRows,
                                const char* call) {
  const HierarchicalLayout& h = rt.hier;
  const int me = rt.group->rank(), peer = h.nodeRanks[position];
  NodeStaging s;
  if (peer == me) {
    s.base = ownStaging;
    s.bytes = ownBytes;
  } else {
    const ScheduleBuilder::PeerSendBuffer mapped =
        b.peerSendBuffer(rt.group->comm->topology().localRank(peer));
    if (!mapped.mapped)
      return makeError(Code::kSystemError,
                       "rank %d %s (hierarchical): could not map rank %d's staging (shared "
                       "memory through /proc/<pid>/fd); set TRNCCL_MOE_DIRECT=0 to forward rows "
                       "inside the node over the transports",
                       me, call, peer);
    s.base = mapped.mapped;
    s.bytes = mapped.bytes;
  }
  const size_t positions = h.nodeRanks.size();
  if (s.bytes < headerBytes(positions))
    return makeError(Code::kInternalError, "rank %d %s: rank %d's staging is %zu bytes", me, call,
                     peer, s.bytes);
  std::memcpy(&s.header, s.base, sizeof s.header);
  const auto* begin = reinterpret_cast<const uint64_t*>(s.base + sizeof(HopStagingHeader));
  if (s.header.positions != positions || begin[h.nodeIndex + 1] < begin[h.nodeIndex] ||
      begin[h.nodeIndex + 1] - begin[h.nodeIndex] != expectRows)
    return makeError(Code::kRemoteError,
                     "rank %d %s (hierarchical): rank %d staged rows for this rank that its "
                     "routing does not expect (%zu); the ranks' routings differ (each rank must "
                     "pass the routing made by the same trncclEpRoutingCreate)",
                     me, call, peer, expectRows);
  s.first = begin[h.nodeIndex];
  return s;
}

Status pastItsStaging(const Routing& rt, int position, const char* call) {
  return makeError(Code::kInternalError,
                   "rank %d %s (hierarchical): rank %d's staging points past its buffers",
                   rt.group->rank(), call, rt.hier.nodeRanks[position]);
}

}  // namespace

Status planDispatchHierarchicalMapped(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                                      const DispatchArgs& a) {
  const Routing& rt = *routing;
  const HierarchicalLayout& h = rt.hier;
  Staging& st = *rt.group->staging;
  const int K = rt.topk, me = rt.group->rank();
  const size_t rowBytes = a.rowBytes, positions = h.nodeRanks.size();
  const size_t hop2Rows = h.hop2Row.size(), proxyRows = h.proxyOrigin.size();
  // Own proxy rows another rank of the node needs: copied into the staging once each.
  std::vector<int64_t> ownSlot(proxyRows, -1);
  size_t ownRows = 0;
  for (size_t di = 0; di < positions; ++di) {
    if (static_cast<int>(di) == h.nodeIndex) continue;
    for (size_t hr = h.hop2Begin[di]; hr < h.hop2Begin[di + 1]; ++hr) {
      const uint32_t pr = h.hop2Row[hr];
      if (h.proxyOrigin[pr] == me && ownSlot[pr] < 0) ownSlot[pr] = static_cast<int64_t>(ownRows++);
    }
  }
  const std::vector<size_t> inAt = hop1InOffsets(h, rowBytes, K);
  const size_t hop1At = headerBytes(positions);
  const size_t ownAt = shm::alignUp(hop1At + inAt.back(), 64);
  const size_t tableAt = shm::alignUp(ownAt + (ownRows * rowBytes), 64);
  const size_t weightsAt = shm::alignUp(tableAt + (hop2Rows * sizeof(uint64_t)), 64);
  const size_t end = weightsAt + (hop2Rows * K * sizeof(float));
  HopStagingHeader header;
  header.tableOffset = tableAt;
  header.weightsOffset = weightsAt;
  int which = 0;
  char* staging = nullptr;
  TRNCCL_RETURN_IF_ERROR(startStaging(st, end, header, h.hop2Begin, &which, &staging));
  std::vector<size_t> servedIndex = servedIndexOf(h);
  auto* table = reinterpret_cast<uint64_t*>(staging + tableAt);
  for (size_t hr = 0; hr < hop2Rows; ++hr) {
    const uint32_t pr = h.hop2Row[hr];
    const size_t s = h.proxySource[pr];
    if (h.proxyOrigin[pr] != me) {
      const size_t i = servedIndex[s];
      table[hr] = hop1At + inAt[i] + ((s - h.hop1InBegin[i]) * rowBytes);
    } else {
      table[hr] = ownSlot[pr] >= 0 ? ownAt + (ownSlot[pr] * rowBytes) : 0;  // 0: from tokens
    }
  }
  for (size_t pr = 0; pr < proxyRows; ++pr)
    if (ownSlot[pr] >= 0)
      copyBytes(staging + ownAt + (ownSlot[pr] * rowBytes),
                byteAt(a.tokens, h.proxySource[pr] * rowBytes), rowBytes);
  sendHop1(b, rt, a, staging + hop1At, inAt);

  // Hop 1 is in: every hop-2 row's weights, in its receiver's order.
  DispatchArgs args = a;
  b.callback([routing, args, staging, hop1At, inAt, weightsAt,
              servedIndex = std::move(servedIndex)](ScheduleBuilder&) {
    const Routing& rt = *routing;
    const HierarchicalLayout& h = rt.hier;
    const int K = rt.topk, me = rt.group->rank();
    auto* weights = reinterpret_cast<float*>(staging + weightsAt);
    for (size_t hr = 0; hr < h.hop2Row.size(); ++hr) {
      const uint32_t pr = h.hop2Row[hr];
      const size_t s = h.proxySource[pr];
      const float* topk = nullptr;
      if (h.proxyOrigin[pr] == me) {
        topk = args.weights ? args.weights + (s * K) : nullptr;
      } else {
        const size_t i = servedIndex[s], rows = h.hop1InBegin[i + 1] - h.hop1InBegin[i];
        const char* msg = staging + hop1At + inAt[i];
        topk = reinterpret_cast<const float*>(weightsOf(msg, rows, args.rowBytes) +
                                              ((s - h.hop1InBegin[i]) * K * sizeof(float)));
      }
      hop2Weights(h, hr, K, topk, weights + (hr * K));
    }
    return Status::ok();
  });
  exchangeStaging(
      b, CollKind::kMoeDispatch, *rt.group, which, a.hidden, rt.group->config.payload,
      /*holdUntilRead=*/false, [routing, args, staging, end](ScheduleBuilder& later) {
        Routing& rt = *routing;
        const HierarchicalLayout& h = rt.hier;
        Staging& st = *rt.group->staging;
        const int K = rt.topk, me = rt.group->rank();
        const size_t rowBytes = args.rowBytes;
        const bool flat = rt.layout == trncclEpLayoutFlat;
        const char* call = args.scaled ? "trncclEpDispatchScaled" : "trncclEpDispatch";
        st.recvWeights.resize(rt.recvRows() * K);
        std::vector<const char*> rowOf(flat ? 0 : rt.recvRows());
        for (size_t pi = 0; pi + 1 < h.hop2InBegin.size(); ++pi) {
          const int position = static_cast<int>(pi);
          const size_t rows = h.hop2InBegin[pi + 1] - h.hop2InBegin[pi];
          auto peer = nodeStaging(later, rt, position, staging, end, rows, call);
          TRNCCL_RETURN_IF_ERROR(peer.status());
          const NodeStaging& s = peer.value();
          const bool own = position == h.nodeIndex;
          if (!s.holds(s.header.tableOffset, (s.first + rows) * sizeof(uint64_t)) ||
              !s.holds(s.header.weightsOffset, (s.first + rows) * K * sizeof(float)))
            return pastItsStaging(rt, position, call);
          const auto* table = reinterpret_cast<const uint64_t*>(s.base + s.header.tableOffset);
          const auto* weights = reinterpret_cast<const float*>(s.base + s.header.weightsOffset);
          for (size_t i = 0; i < rows; ++i) {
            const size_t hr = s.first + i, f = h.finalRow[h.hop2InBegin[pi] + i];
            const char* row = nullptr;
            if (own && h.proxyOrigin[h.hop2Row[hr]] == me) {  // this rank's own token
              row = byteAt(args.tokens, h.proxySource[h.hop2Row[hr]] * rowBytes);
            } else {
              if (!s.holds(table[hr], rowBytes)) return pastItsStaging(rt, position, call);
              row = s.base + table[hr];
            }
            if (flat)
              copyBytes(byteAt(args.outTokens, f * rowBytes), row, rowBytes);
            else
              rowOf[f] = row;
            copyBytes(st.recvWeights.data() + (f * K), weights + (hr * K), K * sizeof(float));
          }
          if (!own)
            later.countPeerRead(rt.group->comm->topology().localRank(h.nodeRanks[pi]),
                                rows * (rowBytes + (K * sizeof(float))));
        }
        return flat ? finishDispatch(rt, args, rowBytes)
                    : finishDispatchRows(rt, args, rowOf.data());
      });
  return Status::ok();
}

Status planCombineHierarchicalMapped(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                                     const CombineArgs& a) {
  const Routing& rt = *routing;
  const HierarchicalLayout& h = rt.hier;
  Staging& st = *rt.group->staging;
  const size_t rowBytes = a.hidden * dtypeSize(rt.group->config.combineType());
  const size_t positions = h.nodeRanks.size();
  // The rows for each proxy of the node (this rank's own position too), made in the staging
  // (expert-major: each row's slots summed straight into it).
  const size_t rowsAt = headerBytes(positions);
  const size_t end = rowsAt + (rt.recvRows() * rowBytes);
  HopStagingHeader header;
  header.rowsOffset = rowsAt;
  int which = 0;
  char* staging = nullptr;
  TRNCCL_RETURN_IF_ERROR(startStaging(st, end, header, h.hop2InBegin, &which, &staging));
  if (rt.layout == trncclEpLayoutFlat) {
    for (size_t j = 0; j < h.finalRow.size(); ++j)
      copyBytes(staging + rowsAt + (j * rowBytes), byteAt(a.expertTokens, h.finalRow[j] * rowBytes),
                rowBytes);
  } else {
    sumSlotsInOrder(rt, a, rowBytes, staging + rowsAt, h.finalRow);
  }
  // Sized now: hop 1 back (planned below) sends from and receives into them.
  const int N = static_cast<int>(h.proxyOfNode.size());
  st.partial.resize(h.proxyOrigin.size() * rowBytes);
  st.recvRows.resize(h.hop1Begin[N] * rowBytes);
  const CombineArgs args = a;
  exchangeStaging(b, CollKind::kMoeCombine, *rt.group, which, a.hidden,
                  rt.group->config.combineType(), /*holdUntilRead=*/false,
                  [routing, args, rowBytes, staging, end](ScheduleBuilder& later) {
                    const Routing& rt = *routing;
                    const HierarchicalLayout& h = rt.hier;
                    const char* call = "trncclEpCombine";
                    // Where the results of this rank's hop-2 rows to each position lie.
                    std::vector<const char*> from(h.nodeRanks.size());
                    std::vector<int> positionOf(h.hop2Row.size());
                    for (size_t di = 0; di < from.size(); ++di) {
                      const size_t rows = h.hop2Begin[di + 1] - h.hop2Begin[di];
                      const int position = static_cast<int>(di);
                      auto peer = nodeStaging(later, rt, position, staging, end, rows, call);
                      TRNCCL_RETURN_IF_ERROR(peer.status());
                      const NodeStaging& s = peer.value();
                      const uint64_t at = s.header.rowsOffset + (s.first * rowBytes);
                      if (!s.holds(at, rows * rowBytes)) return pastItsStaging(rt, position, call);
                      from[di] = s.base + at;
                      std::fill(positionOf.begin() + h.hop2Begin[di],
                                positionOf.begin() + h.hop2Begin[di + 1], position);
                      if (position != h.nodeIndex)
                        later.countPeerRead(rt.group->comm->topology().localRank(h.nodeRanks[di]),
                                            rows * rowBytes);
                    }
                    sumProxyRows(rt, args.hidden, rowBytes, [&](size_t x) -> const char* {
                      const int di = positionOf[x];
                      return from[di] + ((x - h.hop2Begin[di]) * rowBytes);
                    });
                    return Status::ok();
                  });
  sendHop1Back(b, rt, rowBytes);
  b.callback([routing, args, rowBytes](ScheduleBuilder&) {
    sumTokenParts(*routing, args, rowBytes);
    return Status::ok();
  });
  return Status::ok();
}

}  // namespace trnccl::moe
