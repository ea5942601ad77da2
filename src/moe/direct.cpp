// Direct mode: every rank of the group shares one node's memory and maps its peers' staging
// (EpGroup::direct). Each side writes what its peers need once, into staging peers map
// (shm::SharedBuffer), with a header saying where each peer's rows start; after one post and
// wait, every rank reads its rows where they lie: dispatch copies them once into the caller's
// output (flat) or straight into the expert slots (expert-major), and combine sums them where
// they lie. The shm rings would copy every row twice more (into a ring slot and out of it).
// A last post and wait keep each rank's staging unchanged until its peers have read it.
//
// Staging layout (64-byte aligned parts): header words [rowsOffset, weightsOffset,
// begin[0..n]], then rows, then (dispatch) weights. Dispatch: begin = the packed rows for each
// destination (Routing::sendBegin); combine: the rows for each origin in flat order
// (Routing::recvBegin).
#include <algorithm>

#include "collectives/algorithm.hpp"
#include "core/dtype.hpp"
#include "moe/ep_group.hpp"

namespace trnccl::moe {
namespace {

constexpr size_t kHeaderWords = 2;  // rowsOffset, weightsOffset; then begin[n + 1]

size_t align64(size_t bytes) {
  return (bytes + 63) / 64 * 64;
}

size_t headerBytes(int n) {
  return align64((kHeaderWords + n + 1) * sizeof(uint64_t));
}

void writeHeader(char* staging, size_t rowsOffset, size_t weightsOffset,
                 const std::vector<size_t>& begin) {
  auto* words = reinterpret_cast<uint64_t*>(staging);
  words[0] = rowsOffset;
  words[1] = weightsOffset;
  for (size_t q = 0; q < begin.size(); ++q) words[kHeaderWords + q] = begin[q];
}

// Publishes the staging with this call's descriptor, waits for every rank's, runs read (which
// copies out of peers' staging), then holds the staging until every peer has read it.
void exchange(ScheduleBuilder& b, CollKind kind, const EpGroup& g, size_t hidden,
              trncclDataType_t type, std::function<Status(ScheduleBuilder&)> read) {
  shm::OpDescriptor d{};
  d.kind = static_cast<int32_t>(kind);
  d.dtype = static_cast<int32_t>(type);
  d.op = -1;
  d.root = -1;
  d.count = hidden;
  d.sendAddress = reinterpret_cast<uint64_t>(g.staging->shared.data());
  shm::findSharedRegion(g.staging->shared.data(), &d.sendRegion);
  b.publishDescriptor(d);
  b.waitAll(b.post());
  b.checkDescriptors();
  b.callback(std::move(read));
  b.waitAll(b.post());
}

// Peer q's rows (and weights) for this rank in its mapped staging, checked against the
// header's bounds and this rank's routing (ranks whose routings disagree must not read past
// what the peer staged). Local index = rank: the group's ranks all share one node.
struct PeerPart {
  const char* rows = nullptr;
  const float* weights = nullptr;
};

Result<PeerPart> peerPart(const ScheduleBuilder& b, const EpGroup& g, int q, size_t expectRows,
                          size_t rowBytes, int topk, const char* call) {
  const int n = g.nranks(), me = g.rank();
  const ScheduleBuilder::PeerSendBuffer peer = b.peerSendBuffer(q);
  if (!peer.mapped)
    return makeError(Code::kSystemError,
                     "rank %d %s: could not map rank %d's staging (shared memory through "
                     "/proc/<pid>/fd); set TRNCCL_MOE_DIRECT=0 to send rows over the transports",
                     me, call, q);
  if (peer.bytes < headerBytes(n))
    return makeError(Code::kInternalError, "rank %d %s: rank %d's staging is %zu bytes", me, call,
                     q, peer.bytes);
  const auto* words = reinterpret_cast<const uint64_t*>(peer.mapped);
  const uint64_t rowsOffset = words[0], weightsOffset = words[1];
  const uint64_t first = words[kHeaderWords + me], last = words[kHeaderWords + me + 1];
  if (last < first || last - first != expectRows)
    return makeError(Code::kRemoteError,
                     "rank %d %s: rank %d staged %llu rows for this rank, its routing expects "
                     "%zu; the ranks' routings differ (each rank must pass the routing made "
                     "by the same trncclEpRoutingCreate)",
                     me, call, q, static_cast<unsigned long long>(last - first), expectRows);
  const bool weightsToo = weightsOffset != 0;
  if (rowsOffset + last * rowBytes > peer.bytes ||
      (weightsToo && weightsOffset + last * topk * sizeof(float) > peer.bytes))
    return makeError(Code::kInternalError,
                     "rank %d %s: rank %d's staging header points past its %zu bytes", me, call, q,
                     peer.bytes);
  PeerPart part;
  part.rows = peer.mapped + rowsOffset + (first * rowBytes);
  if (weightsToo)
    part.weights = reinterpret_cast<const float*>(peer.mapped + weightsOffset) + (first * topk);
  b.countPeerRead(q, expectRows * (rowBytes + (weightsToo ? topk * sizeof(float) : 0)));
  return part;
}

Status readDispatch(const ScheduleBuilder& b, Routing& rt, const DispatchArgs& a, size_t rowBytes) {
  const EpGroup& g = *rt.group;
  Staging& st = *g.staging;
  const int n = g.nranks(), me = g.rank(), K = rt.topk;
  const bool flat = rt.layout == trncclEpLayoutFlat;
  const char* call = a.scaled ? "trncclEpDispatchScaled" : "trncclEpDispatch";
  st.recvWeights.resize(rt.recvRows() * K);
  const auto* own = reinterpret_cast<const uint64_t*>(st.shared.data());
  copyBytes(st.recvWeights.data() + (rt.recvBegin[me] * K),
            reinterpret_cast<const float*>(st.shared.data() + own[1]) + (rt.sendBegin[me] * K),
            rt.sendRows(me) * K * sizeof(float));
  std::vector<const char*> rowsFrom(n, nullptr);
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    const size_t rows = rt.recvRowsFrom(q);
    auto part = peerPart(b, g, q, rows, rowBytes, K, call);
    TRNCCL_RETURN_IF_ERROR(part.status());
    copyBytes(st.recvWeights.data() + (rt.recvBegin[q] * K), part.value().weights,
              rows * K * sizeof(float));
    rowsFrom[q] = part.value().rows;
    if (flat)
      copyBytes(byteAt(a.outTokens, rt.recvBegin[q] * rowBytes), rowsFrom[q], rows * rowBytes);
  }
  // Expert-major: finishDispatch copies each row from the peer's staging into its slots.
  return finishDispatch(rt, a, rowBytes, rowsFrom.data());
}

}  // namespace

Status planDispatchDirect(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                          const DispatchArgs& a) {
  const Routing& rt = *routing;
  const EpGroup& g = *rt.group;
  Staging& st = *g.staging;
  const int n = g.nranks(), me = g.rank();
  const size_t rowBytes = a.rowBytes, rows = rt.sendBegin[n];
  const size_t rowsOffset = headerBytes(n);
  const size_t weightsOffset = align64(rowsOffset + (rows * rowBytes));
  TRNCCL_RETURN_IF_ERROR(st.shared.reserve(weightsOffset + (rows * rt.topk * sizeof(float))));
  char* staging = st.shared.data();
  writeHeader(staging, rowsOffset, weightsOffset, rt.sendBegin);
  packRows(rt, a, rowBytes, staging + rowsOffset,
           reinterpret_cast<float*>(staging + weightsOffset));
  if (rt.layout == trncclEpLayoutFlat)  // this rank's own rows: straight from its tokens
    for (size_t i = 0; i < rt.sendRows(me); ++i)
      copyBytes(byteAt(a.outTokens, (rt.recvBegin[me] + i) * rowBytes),
                byteAt(a.tokens, rt.rowToken[rt.sendBegin[me] + i] * rowBytes), rowBytes);
  const DispatchArgs args = a;
  exchange(b, CollKind::kMoeDispatch, g, a.hidden, g.config.payload,
           [routing, args, rowBytes](ScheduleBuilder& later) {
             return readDispatch(later, *routing, args, rowBytes);
           });
  return Status::ok();
}

Status planCombineDirect(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                         const CombineArgs& a) {
  const Routing& rt = *routing;
  const EpGroup& g = *rt.group;
  Staging& st = *g.staging;
  const int n = g.nranks(), me = g.rank();
  const size_t rowBytes = a.hidden * dtypeSize(g.config.combineType());
  const size_t rowsOffset = headerBytes(n);
  TRNCCL_RETURN_IF_ERROR(st.shared.reserve(rowsOffset + (rt.recvRows() * rowBytes)));
  char* staging = st.shared.data();
  writeHeader(staging, rowsOffset, 0, rt.recvBegin);
  // The rows in flat order where peers read them: expert-major sums each row's slots there;
  // flat stages every peer's rows (this rank's own are read from the caller's buffer).
  const char* ownRows;
  if (rt.layout == trncclEpLayoutFlat) {
    for (int q = 0; q < n; ++q)
      if (q != me)
        copyBytes(staging + rowsOffset + (rt.recvBegin[q] * rowBytes),
                  byteAt(a.expertTokens, rt.recvBegin[q] * rowBytes),
                  rt.recvRowsFrom(q) * rowBytes);
    ownRows = byteAt(a.expertTokens, rt.recvBegin[me] * rowBytes);
  } else {
    sumSlots(rt, a, rowBytes, staging + rowsOffset);
    ownRows = staging + rowsOffset + (rt.recvBegin[me] * rowBytes);
  }
  const CombineArgs args = a;
  exchange(
      b, CollKind::kMoeCombine, g, a.hidden, g.config.combineType(),
      [routing, args, rowBytes, ownRows](ScheduleBuilder& later) -> Status {
        const Routing& rt = *routing;
        const EpGroup& g = *rt.group;
        const int n = g.nranks(), me = g.rank();
        std::vector<const char*> rowsAt(n);  // the first row each destination sent back
        rowsAt[me] = ownRows;
        for (int q = 0; q < n; ++q) {
          if (q == me) continue;
          auto part = peerPart(later, g, q, rt.sendRows(q), rowBytes, rt.topk, "trncclEpCombine");
          TRNCCL_RETURN_IF_ERROR(part.status());
          rowsAt[q] = part.value().rows;
        }
        // Each token's rows in ascending destination order, as the transports' path
        // sums them: the same result bit for bit.
        std::vector<const void*> srcs;
        for (size_t t = 0; t < rt.numTokens; ++t) {
          srcs.clear();
          for (size_t i = rt.tokenBegin[t]; i < rt.tokenBegin[t + 1]; ++i) {
            const size_t p = rt.tokenRows[i];
            const int q =
                static_cast<int>(std::upper_bound(rt.sendBegin.begin(), rt.sendBegin.end(), p) -
                                 rt.sendBegin.begin() - 1);
            srcs.push_back(rowsAt[q] + ((p - rt.sendBegin[q]) * rowBytes));
          }
          sumRows(g.config.combineType(), byteAt(args.out, t * rowBytes), srcs.data(),
                  static_cast<int>(srcs.size()), args.hidden, rowBytes);
        }
        return Status::ok();
      });
  return Status::ok();
}

}  // namespace trnccl::moe
