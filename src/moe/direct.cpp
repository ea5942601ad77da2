// Direct mode: every rank of the group shares one node's memory and maps its peers' staging
// (EpGroup::direct). Each side writes what its peers need once, into staging peers map
// (shm::SharedBuffer), with a header saying where each peer's rows start; after one post and
// wait, every rank reads its rows where they lie: dispatch copies them once into the caller's
// output (flat) or straight into the expert slots (expert-major), and combine sums them where
// they lie. The shm rings would copy every row twice more (into a ring slot and out of it).
// A last post says that a rank has read; the group's two staging buffers, used in turn, keep
// each rank's staging unchanged until its peers have read it (exchangeStaging() says why that
// holds).
//
// Low-latency routings exchanged no counts when they were made: their dispatch stages each
// row's local expert ids too, and readers learn what they receive from the peers' headers
// (learnLowLatencyRows) before copying rows, in the same single exchange.
//
// Staging layout (64-byte aligned parts): header words [rowsOffset, weightsOffset,
// begin[0..n]], then rows, then (dispatch) weights, then (low latency) ids, then (dispatch) the
// staged tokens. Dispatch: begin = the packed rows for each destination (Routing::sendBegin),
// each row a token index into the staged tokens (or the caller's trncclMemAlloc tokens), so a
// token several peers need is staged once; combine: the rows for each origin in flat order
// (Routing::recvBegin).
#include <algorithm>
#include <cstring>
#include <new>

#include "collectives/algorithm.hpp"
#include "core/dtype.hpp"
#include "moe/ep_group.hpp"
#include "transports/shm/segment.hpp"

namespace trnccl::moe {
namespace {

// The start of every rank's staging; begin[n + 1] follows it.
struct StagingHeader {
  uint64_t rowsOffset = 0;          // rows: dispatch's packed rows, combine's in flat order
  uint64_t weightsOffset = 0;       // dispatch: each packed row's weights
  uint64_t slotsOffset = 0;         // combine from the outputs, expert-major: rows x K slots
  uint64_t slotWeightsOffset = 0;   // ... and each slot's weight (0: unweighted)
  uint64_t fromOutputs = 0;         // combine: 1 = read the caller's expertTokens (outputs)
  shm::SharedRegion outputs;        // where they are, in memory peers map
  uint64_t rowTokensOffset = 0;     // dispatch: each packed row's token (staged or in tokens)
  shm::SharedRegion tokens;         // the caller's tokens, in memory peers map (trncclMemAlloc)
  uint64_t idsOffset = 0;           // low-latency dispatch: each packed row's K local expert ids
  uint64_t stagedTokensOffset = 0;  // dispatch: the tokens peers need, each once, in staging
};

size_t headerBytes(int n) {
  return shm::alignUp(sizeof(StagingHeader) + ((n + 1) * sizeof(uint64_t)), 64);
}

StagingHeader* writeHeader(char* staging, const std::vector<size_t>& begin) {
  auto* header = new (staging) StagingHeader();
  auto* words = reinterpret_cast<uint64_t*>(staging + sizeof(StagingHeader));
  for (size_t q = 0; q < begin.size(); ++q) words[q] = begin[q];
  return header;
}

// Peer q's staging as this rank reads it: its header and where this rank's rows begin and end
// in its order, checked against this rank's routing (ranks whose routings disagree must not
// read past what the peer staged). Local index = rank: the group's ranks share one node.
struct PeerStaging {
  const char* base = nullptr;
  size_t bytes = 0;
  StagingHeader header;
  uint64_t first = 0, last = 0;
  // Whether [offset + first * unit, offset + last * unit) lies inside the staging.
  bool holds(uint64_t offset, size_t unit) const {
    return offset != 0 && offset + (last * unit) <= bytes;
  }
};

// Peer q's staging mapped here, its header copied and this rank's row range read; nothing
// checked against this rank's routing yet.
Result<PeerStaging> mappedStaging(const ScheduleBuilder& b, const EpGroup& g, int q,
                                  const char* call) {
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
  PeerStaging s;
  s.base = peer.mapped;
  s.bytes = peer.bytes;
  std::memcpy(&s.header, peer.mapped, sizeof s.header);
  const auto* begin = reinterpret_cast<const uint64_t*>(peer.mapped + sizeof(StagingHeader));
  s.first = begin[me];
  s.last = begin[me + 1];
  return s;
}

Result<PeerStaging> peerStaging(const ScheduleBuilder& b, const EpGroup& g, int q,
                                size_t expectRows, const char* call) {
  auto staging = mappedStaging(b, g, q, call);
  TRNCCL_RETURN_IF_ERROR(staging.status());
  const PeerStaging& s = staging.value();
  if (s.last < s.first || s.last - s.first != expectRows)
    return makeError(Code::kRemoteError,
                     "rank %d %s: rank %d staged %llu rows for this rank, its routing expects "
                     "%zu; the ranks' routings differ (each rank must pass the routing made "
                     "by the same trncclEpRoutingCreate)",
                     g.rank(), call, q, static_cast<unsigned long long>(s.last - s.first),
                     expectRows);
  return staging;
}

Status pastItsStaging(const EpGroup& g, int q, const char* call) {
  return makeError(Code::kInternalError,
                   "rank %d %s: rank %d's staging header points past its buffers", g.rank(), call,
                   q);
}

// A trncclMemAlloc allocation peer q published (its tokens or its expert outputs), mapped here.
Result<ScheduleBuilder::PeerSendBuffer> peerAllocation(const ScheduleBuilder& b, const EpGroup& g,
                                                       int q, const shm::SharedRegion& region,
                                                       const char* what, const char* call) {
  const ScheduleBuilder::PeerSendBuffer mapped = b.peerRegion(q, region);
  if (!mapped.mapped)
    return makeError(Code::kSystemError,
                     "rank %d %s: could not map rank %d's %s (trncclMemAlloc memory, through "
                     "/proc/<pid>/fd); set TRNCCL_MOE_DIRECT=0",
                     g.rank(), call, q, what);
  return mapped;
}

// Peer q's tokens as this rank reads them: row i at base + rowToken[i] * rowBytes, every
// token index (from the peer's staging) checked to lie inside the tokens.
struct PeerTokens {
  const char* base = nullptr;
  const uint64_t* rowToken = nullptr;
};

Result<PeerTokens> peerTokens(const ScheduleBuilder& b, const EpGroup& g, const PeerStaging& s,
                              int q, size_t rows, size_t rowBytes, const char* call) {
  if (!s.holds(s.header.rowTokensOffset, sizeof(uint64_t))) return pastItsStaging(g, q, call);
  PeerTokens out;
  uint64_t held = 0;
  if (s.header.tokens.id != 0) {  // the peer's own trncclMemAlloc tokens
    auto tokens = peerAllocation(b, g, q, s.header.tokens, "tokens", call);
    TRNCCL_RETURN_IF_ERROR(tokens.status());
    out.base = tokens.value().mapped;
    held = tokens.value().bytes / rowBytes;
  } else {  // the tokens it staged
    const uint64_t offset = s.header.stagedTokensOffset;
    if (offset == 0 || offset > s.bytes) return pastItsStaging(g, q, call);
    out.base = s.base + offset;
    held = (s.bytes - offset) / rowBytes;
  }
  out.rowToken = reinterpret_cast<const uint64_t*>(s.base + s.header.rowTokensOffset) + s.first;
  for (size_t i = 0; i < rows; ++i)
    if (out.rowToken[i] >= held) return pastItsStaging(g, q, call);
  return out;
}

// Low latency: no counts were exchanged at routing creation, so what this rank receives is
// learnt here from every peer's staging (its header's row ranges and its table of each row's
// local expert ids), as readMeta learns it from the meta messages over the transports; the same
// checks (a peer's count within maxDispatchTokensPerRank, ids within this rank's experts, the
// expert side within the caller's capacity).
Status learnLowLatencyRows(const ScheduleBuilder& b, Routing& rt, size_t capacity,
                           const char* call) {
  const EpGroup& g = *rt.group;
  const int n = g.nranks(), me = g.rank(), K = rt.topk;
  const uint64_t limit = static_cast<uint64_t>(g.config.maxDispatchTokens);
  std::vector<const int32_t*> ids(n);
  rt.recvBegin.assign(n + 1, 0);
  for (int q = 0; q < n; ++q) {
    uint64_t rows = rt.sendRows(me);
    ids[q] = rt.sendIds.data() + (rt.sendBegin[me] * K);
    if (q != me) {
      auto staging = mappedStaging(b, g, q, call);
      TRNCCL_RETURN_IF_ERROR(staging.status());
      const PeerStaging& s = staging.value();
      if (s.last < s.first || s.last - s.first > limit)
        return makeError(Code::kRemoteError,
                         "rank %d %s (low latency): rank %d staged %lld rows for this rank, past "
                         "the capacity of %d per rank; its routing or configuration differs",
                         me, call, q, static_cast<long long>(s.last - s.first),
                         g.config.maxDispatchTokens);
      if (!s.holds(s.header.idsOffset, K * sizeof(int32_t))) return pastItsStaging(g, q, call);
      rows = s.last - s.first;
      ids[q] = reinterpret_cast<const int32_t*>(s.base + s.header.idsOffset) + (s.first * K);
      b.countPeerRead(q, rows * K * sizeof(int32_t));
    }
    rt.recvBegin[q + 1] = rt.recvBegin[q] + rows;
  }
  rt.recvIds.resize(rt.recvRows() * K);
  for (int q = 0; q < n; ++q) {
    const size_t entries = rt.recvRowsFrom(q) * K;
    for (size_t e = 0; e < entries; ++e)
      if (ids[q][e] < -1 || ids[q][e] >= g.localExperts)
        return makeError(Code::kRemoteError,
                         "rank %d %s (low latency): rank %d staged local expert id %d, but this "
                         "rank holds %d experts; the ranks' configurations differ",
                         me, call, q, ids[q][e], g.localExperts);
    copyBytes(rt.recvIds.data() + (rt.recvBegin[q] * K), ids[q], entries * sizeof(int32_t));
  }
  buildExpertSide(&rt);
  if (rt.received() > capacity)  // cannot happen: capacity holds the worst case
    return makeError(Code::kInternalError,
                     "rank %d %s (low latency): %zu rows/slots arrived, past the worst case of "
                     "%zu",
                     me, call, rt.received(), capacity);
  return Status::ok();
}

// The caller's own rows for itself (flat layout), straight from its tokens.
void landOwnRows(const Routing& rt, const DispatchArgs& a, size_t rowBytes) {
  const int me = rt.group->rank();
  const size_t payloadBytes = a.hidden * dtypeSize(rt.group->config.payload);
  for (size_t i = 0; i < rt.sendRows(me); ++i)
    landRow(a, payloadBytes, rt.recvBegin[me] + i,
            byteAt(a.tokens, rt.rowToken[rt.sendBegin[me] + i] * rowBytes));
}

Status readDispatch(const ScheduleBuilder& b, Routing& rt, const DispatchArgs& a, size_t rowBytes,
                    const char* ownStaging) {
  const EpGroup& g = *rt.group;
  Staging& st = *g.staging;
  const int n = g.nranks(), me = g.rank(), K = rt.topk;
  const bool flat = rt.layout == trncclEpLayoutFlat;
  const char* call = a.scaled ? "trncclEpDispatchScaled" : "trncclEpDispatch";
  const size_t payloadBytes = a.hidden * dtypeSize(g.config.payload);
  if (rt.lowLatency) {
    TRNCCL_RETURN_IF_ERROR(learnLowLatencyRows(b, rt, a.outCapacity, call));
    if (flat) landOwnRows(rt, a, rowBytes);
  }
  st.recvWeights.resize(rt.recvRows() * K);
  const auto* own = reinterpret_cast<const StagingHeader*>(ownStaging);
  copyBytes(
      st.recvWeights.data() + (rt.recvBegin[me] * K),
      reinterpret_cast<const float*>(ownStaging + own->weightsOffset) + (rt.sendBegin[me] * K),
      rt.sendRows(me) * K * sizeof(float));
  // Expert-major: where each received row is, for finishDispatchRows to copy into its slots
  // (this rank's own rows straight from its tokens).
  std::vector<const char*> rowOf(flat ? 0 : rt.recvRows());
  for (size_t i = 0; i < rowOf.size() && i < rt.sendRows(me); ++i)
    rowOf[rt.recvBegin[me] + i] = byteAt(a.tokens, rt.rowToken[rt.sendBegin[me] + i] * rowBytes);
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    const size_t rows = rt.recvRowsFrom(q);
    auto peer = peerStaging(b, g, q, rows, call);
    TRNCCL_RETURN_IF_ERROR(peer.status());
    const PeerStaging& s = peer.value();
    if (!s.holds(s.header.weightsOffset, K * sizeof(float))) return pastItsStaging(g, q, call);
    copyBytes(st.recvWeights.data() + (rt.recvBegin[q] * K),
              reinterpret_cast<const float*>(s.base + s.header.weightsOffset) + (s.first * K),
              rows * K * sizeof(float));
    b.countPeerRead(q, rows * (rowBytes + (K * sizeof(float))));
    if (s.header.rowTokensOffset != 0) {  // rows by token index (staged or the caller's)
      auto tokens = peerTokens(b, g, s, q, rows, rowBytes, call);
      TRNCCL_RETURN_IF_ERROR(tokens.status());
      const PeerTokens& t = tokens.value();
      if (!flat) {
        for (size_t i = 0; i < rows; ++i)
          rowOf[rt.recvBegin[q] + i] = t.base + (t.rowToken[i] * rowBytes);
        continue;
      }
      for (size_t i = 0, j = 0; i < rows; i = j) {  // adjacent tokens in one copy
        for (j = i + 1; j < rows && t.rowToken[j] == t.rowToken[j - 1] + 1;) ++j;
        copyBytes(byteAt(a.outTokens, (rt.recvBegin[q] + i) * rowBytes),
                  t.base + (t.rowToken[i] * rowBytes), (j - i) * rowBytes);
      }
      continue;
    }
    if (!s.holds(s.header.rowsOffset, rowBytes)) return pastItsStaging(g, q, call);
    const char* rowsFrom = s.base + s.header.rowsOffset + (s.first * rowBytes);
    if (flat && !a.scaled)
      copyBytes(byteAt(a.outTokens, rt.recvBegin[q] * rowBytes), rowsFrom, rows * rowBytes);
    else if (flat)  // fp8: payload and scale straight into the caller's buffers
      for (size_t i = 0; i < rows; ++i)
        landRow(a, payloadBytes, rt.recvBegin[q] + i, rowsFrom + (i * rowBytes));
    else
      for (size_t i = 0; i < rows; ++i) rowOf[rt.recvBegin[q] + i] = rowsFrom + (i * rowBytes);
  }
  return flat ? finishDispatch(rt, a, rowBytes) : finishDispatchRows(rt, a, rowOf.data());
}

// Where combine finds the rows one destination rank sends back to this rank: ready rows, or
// the slots of the expert outputs that make them (summed here, as sumSlots would there).
struct RowSource {
  const char* rows = nullptr;       // row i at rows + i * rowBytes
  const char* slots = nullptr;      // or: the expert outputs ...
  const int64_t* slotOf = nullptr;  // ... row i's slots at slotOf[i * K ...]
  const float* slotWeights = nullptr;
};

Result<RowSource> peerRows(const ScheduleBuilder& b, const Routing& rt, int q, size_t rowBytes) {
  const EpGroup& g = *rt.group;
  const int K = rt.topk;
  const char* call = "trncclEpCombine";
  const size_t rows = rt.sendRows(q);
  auto peer = peerStaging(b, g, q, rows, call);
  TRNCCL_RETURN_IF_ERROR(peer.status());
  const PeerStaging& s = peer.value();
  RowSource source;
  if (!s.header.fromOutputs) {
    if (!s.holds(s.header.rowsOffset, rowBytes)) return pastItsStaging(g, q, call);
    source.rows = s.base + s.header.rowsOffset + (s.first * rowBytes);
    b.countPeerRead(q, rows * rowBytes);
    return source;
  }
  auto mapped = peerAllocation(b, g, q, s.header.outputs, "expert outputs", call);
  TRNCCL_RETURN_IF_ERROR(mapped.status());
  const ScheduleBuilder::PeerSendBuffer& outputs = mapped.value();
  if (rt.layout == trncclEpLayoutFlat) {
    if (s.last * rowBytes > outputs.bytes) return pastItsStaging(g, q, call);
    source.rows = outputs.mapped + (s.first * rowBytes);
    b.countPeerRead(q, rows * rowBytes);
    return source;
  }
  if (!s.holds(s.header.slotsOffset, K * sizeof(int64_t))) return pastItsStaging(g, q, call);
  source.slots = outputs.mapped;
  source.slotOf = reinterpret_cast<const int64_t*>(s.base + s.header.slotsOffset) + (s.first * K);
  // Every slot this rank will read must lie in the outputs (and have its weight staged).
  int64_t maxSlot = -1;
  size_t slots = 0;
  for (size_t e = 0; e < rows * K; ++e) {
    maxSlot = std::max(maxSlot, source.slotOf[e]);
    slots += source.slotOf[e] >= 0;
  }
  const size_t held = outputs.bytes / rowBytes;
  if (maxSlot >= 0 && static_cast<size_t>(maxSlot) >= held) return pastItsStaging(g, q, call);
  if (s.header.slotWeightsOffset) {
    if (s.header.slotWeightsOffset + ((maxSlot + 1) * sizeof(float)) > s.bytes)
      return pastItsStaging(g, q, call);
    source.slotWeights = reinterpret_cast<const float*>(s.base + s.header.slotWeightsOffset);
  }
  b.countPeerRead(q, slots * rowBytes);
  return source;
}

// The origin's sums: each token's rows in ascending destination order, as every path sums
// them (rows made from slots first, with the expert side's arithmetic): the same bits.
Status sumTokens(const ScheduleBuilder& b, const Routing& rt, const CombineArgs& a, size_t rowBytes,
                 const RowSource& own) {
  const EpGroup& g = *rt.group;
  Staging& st = *g.staging;
  const int n = g.nranks(), me = g.rank(), K = rt.topk;
  const trncclDataType_t type = g.config.combineType();
  std::vector<RowSource> from(n);
  from[me] = own;
  for (int q = 0; q < n; ++q) {
    if (q == me || rt.sendRows(q) == 0) continue;
    auto source = peerRows(b, rt, q, rowBytes);
    TRNCCL_RETURN_IF_ERROR(source.status());
    from[q] = source.value();
  }
  st.accumulator.resize(a.hidden);
  st.recvRows.resize(n * rowBytes);  // a token's rows made from slots (at most one per rank)
  std::vector<const void*> srcs, slotSrcs(K);
  std::vector<int> destOfRow(rt.sendBegin[n]);
  for (int q = 0; q < n; ++q)
    std::fill(destOfRow.begin() + rt.sendBegin[q], destOfRow.begin() + rt.sendBegin[q + 1], q);
  for (size_t t = 0; t < rt.numTokens; ++t) {
    srcs.clear();
    for (size_t r = rt.tokenBegin[t]; r < rt.tokenBegin[t + 1]; ++r) {
      const size_t p = rt.tokenRows[r];
      const int q = destOfRow[p];
      const RowSource& source = from[q];
      const size_t i = p - rt.sendBegin[q];
      if (source.rows) {
        srcs.push_back(source.rows + (i * rowBytes));
        continue;
      }
      char* made = st.recvRows.data() + (srcs.size() * rowBytes);
      sumRowSlots(type, made, source.slots, source.slotOf + (i * K), K, source.slotWeights,
                  a.hidden, rowBytes, st.accumulator.data(), slotSrcs.data());
      srcs.push_back(made);
    }
    // The next token's slots, while this one is summed.
    if (t + 1 < rt.numTokens)
      for (size_t r = rt.tokenBegin[t + 1]; r < rt.tokenBegin[t + 2]; ++r) {
        const size_t p = rt.tokenRows[r];
        const RowSource& source = from[destOfRow[p]];
        if (!source.rows)
          prefetchSlots(source.slots, source.slotOf + ((p - rt.sendBegin[destOfRow[p]]) * K), K,
                        rowBytes);
      }
    sumRows(type, byteAt(a.out, t * rowBytes), srcs.data(), static_cast<int>(srcs.size()), a.hidden,
            rowBytes);
  }
  return Status::ok();
}

}  // namespace

// Publishes staging buffer `which` with this call's descriptor, waits for every rank of the
// node (the direct mode: every rank of the group; the hierarchical mode's second hop: its
// node's ranks), maps every local peer's staging and runs read (which copies out of it), then
// posts that it has read. The call returns without waiting for its peers' reads when they read
// only this staging and have all mapped it before: the group's exchanges use its two buffers in
// turn, and before this rank plans the exchange after the next one (which refills this buffer)
// the next one has waited for every peer's first post, which each peer makes after reading this
// one. It waits (holds) when a peer may not have mapped the buffer yet (new, or grown into a
// new allocation: the peer opens it through /proc/<pid>/fd, which needs it open) and when peers
// read the caller's own trncclMemAlloc memory (holdUntilRead), which the caller may change as
// soon as the call returns. Every rank posts alike either way (the counters stay uniform).
void exchangeStaging(ScheduleBuilder& b, CollKind kind, const EpGroup& g, int which, size_t hidden,
                     trncclDataType_t type, bool holdUntilRead,
                     std::function<Status(ScheduleBuilder&)> read) {
  Staging& st = *g.staging;
  const char* staging = st.shared[which].data();
  shm::OpDescriptor d{};
  d.kind = static_cast<int32_t>(kind);
  d.dtype = static_cast<int32_t>(type);
  d.op = -1;
  d.root = -1;
  d.count = hidden;
  d.sendAddress = reinterpret_cast<uint64_t>(staging);
  shm::findSharedRegion(staging, &d.sendRegion);
  const bool hold = holdUntilRead || d.sendRegion.id != st.peersMapped[which];
  st.peersMapped[which] = d.sendRegion.id;  // by the end of this call, if it holds
  b.publishDescriptor(d);
  b.waitAll(b.post());
  b.checkDescriptors();
  const int localSize = b.localSize();
  const int myLocal = g.comm->topology().localRank(g.rank());
  b.callback([read = std::move(read), localSize, myLocal](ScheduleBuilder& later) {
    for (int q = 0; q < localSize; ++q)
      if (q != myLocal) (void)later.peerSendBuffer(q);  // mapped now, whether read from or not
    return read(later);
  });
  const uint64_t peersRead = b.post();
  if (hold) b.waitAll(peersRead);
}

// Tokens peers need, each once (stagedToken[t] = its place, or kNotStaged), in token order.
constexpr uint64_t kNotStaged = UINT64_MAX;

size_t placeStagedTokens(const Routing& rt, std::vector<uint64_t>* stagedToken) {
  const int n = rt.group->nranks(), me = rt.group->rank();
  stagedToken->assign(rt.numTokens, kNotStaged);
  for (int q = 0; q < n; ++q)
    if (q != me)
      for (size_t p = rt.sendBegin[q]; p < rt.sendBegin[q + 1]; ++p)
        (*stagedToken)[rt.rowToken[p]] = 0;
  size_t staged = 0;
  for (uint64_t& place : *stagedToken)
    if (place != kNotStaged) place = staged++;
  return staged;
}

void stageTokens(const Routing& rt, const DispatchArgs& a, size_t rowBytes,
                 const std::vector<uint64_t>& stagedToken, char* to) {
  for (size_t t = 0, u = 0; t < rt.numTokens; t = u) {  // runs of staged tokens in one copy
    if (stagedToken[t] == kNotStaged) {
      u = t + 1;
      continue;
    }
    for (u = t + 1; u < rt.numTokens && stagedToken[u] != kNotStaged;) ++u;
    copyBytes(to + (stagedToken[t] * rowBytes), byteAt(a.tokens, t * rowBytes), (u - t) * rowBytes);
  }
}

Status planDispatchDirect(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                          const DispatchArgs& a) {
  const Routing& rt = *routing;
  const EpGroup& g = *rt.group;
  Staging& st = *g.staging;
  const int n = g.nranks();
  const size_t rowBytes = a.rowBytes, rows = rt.sendBegin[n];
  // Peers read rows by token index: out of the caller's tokens where they are when those are
  // memory peers map (trncclMemAlloc; nothing is staged but each row's token index and
  // weights), else out of the tokens staged here, each once however many peers need it. (A
  // scaled dispatch's rows carry their scale, so they are staged per destination.)
  shm::SharedRegion tokens;
  const bool fromTokens = !a.scaled && rt.numTokens > 0 &&
                          shm::findSharedRegion(a.tokens, &tokens) &&
                          tokens.offset + (rt.numTokens * rowBytes) <= tokens.bytes;
  const bool byIndex = !a.scaled;
  const size_t staged = byIndex && !fromTokens ? placeStagedTokens(rt, &st.stagedToken) : 0;
  const size_t rowsOffset = headerBytes(n);
  const size_t weightsOffset =
      shm::alignUp(rowsOffset + (rows * (byIndex ? sizeof(uint64_t) : rowBytes)), 64);
  // Low latency: each row's local expert ids too (what the routing would have exchanged).
  size_t end = weightsOffset + (rows * rt.topk * sizeof(float)), idsOffset = 0;
  if (rt.lowLatency) {
    idsOffset = shm::alignUp(end, 64);
    end = idsOffset + (rows * rt.topk * sizeof(int32_t));
  }
  const size_t tokensOffset = shm::alignUp(end, 64);
  end = tokensOffset + (staged * rowBytes);
  const int which = st.takeShared();
  TRNCCL_RETURN_IF_ERROR(st.shared[which].reserve(end));
  char* staging = st.shared[which].data();
  StagingHeader* header = writeHeader(staging, rt.sendBegin);
  header->weightsOffset = weightsOffset;
  header->idsOffset = idsOffset;
  if (rt.lowLatency)
    copyBytes(staging + idsOffset, rt.sendIds.data(), rows * rt.topk * sizeof(int32_t));
  if (byIndex) {
    header->rowTokensOffset = rowsOffset;
    auto* rowToken = reinterpret_cast<uint64_t*>(staging + rowsOffset);
    if (fromTokens) {
      header->tokens = tokens;
      std::copy(rt.rowToken.begin(), rt.rowToken.begin() + rows, rowToken);
    } else {
      header->stagedTokensOffset = tokensOffset;
      // This rank's own rows are never read from staging: their entries say token 0.
      for (size_t p = 0; p < rows; ++p) {
        const uint64_t place = st.stagedToken[rt.rowToken[p]];
        rowToken[p] = place == kNotStaged ? 0 : place;
      }
      stageTokens(rt, a, rowBytes, st.stagedToken, staging + tokensOffset);
    }
  } else {
    header->rowsOffset = rowsOffset;
  }
  packRows(rt, a, rowBytes, byIndex ? nullptr : staging + rowsOffset,
           reinterpret_cast<float*>(staging + weightsOffset));
  // This rank's own rows land now (flat), unless low latency: where they go is known once the
  // peers' counts are read.
  if (rt.layout == trncclEpLayoutFlat && !rt.lowLatency) landOwnRows(rt, a, rowBytes);
  DispatchArgs args = a;
  args.landed = true;
  exchangeStaging(b, CollKind::kMoeDispatch, g, which, a.hidden, g.config.payload,
                  /*holdUntilRead=*/fromTokens,
                  [routing, args, rowBytes, staging](ScheduleBuilder& later) {
                    return readDispatch(later, *routing, args, rowBytes, staging);
                  });
  return Status::ok();
}

Status planCombineDirect(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                         const CombineArgs& a) {
  const Routing& rt = *routing;
  const EpGroup& g = *rt.group;
  Staging& st = *g.staging;
  const int n = g.nranks(), me = g.rank(), K = rt.topk;
  const bool flat = rt.layout == trncclEpLayoutFlat;
  const size_t rowBytes = a.hidden * dtypeSize(g.config.combineType());
  // Expert outputs in memory peers map (trncclMemAlloc) are read where they are: nothing is
  // staged but (expert-major) each row's slots and the slots' weights.
  shm::SharedRegion outputs;
  const size_t outputRows = flat ? rt.recvRows() : rt.recvSlots();
  const bool fromOutputs = outputRows > 0 && shm::findSharedRegion(a.expertTokens, &outputs) &&
                           outputs.offset + (outputRows * rowBytes) <= outputs.bytes;
  const size_t base = headerBytes(n);
  size_t need = base;
  if (!fromOutputs)
    need += rt.recvRows() * rowBytes;
  else if (!flat)
    need += shm::alignUp(rt.recvRows() * K * sizeof(int64_t), 64) + (rt.recvSlots() * 4);
  const int which = st.takeShared();
  TRNCCL_RETURN_IF_ERROR(st.shared[which].reserve(need));
  char* staging = st.shared[which].data();
  StagingHeader* header = writeHeader(staging, rt.recvBegin);
  if (fromOutputs) {
    header->fromOutputs = 1;
    header->outputs = outputs;
    if (!flat) {
      header->slotsOffset = base;
      copyBytes(staging + base, rt.slotOf.data(), rt.slotOf.size() * sizeof(int64_t));
      if (a.weighted) {
        header->slotWeightsOffset = base + shm::alignUp(rt.slotOf.size() * sizeof(int64_t), 64);
        copyBytes(staging + header->slotWeightsOffset, rt.slotWeights.data(),
                  rt.slotWeights.size() * sizeof(float));
      }
    }
  } else {
    // The rows other ranks read, in flat order (this rank's own are made where it reads them).
    header->rowsOffset = base;
    if (flat) {
      for (int q = 0; q < n; ++q)
        if (q != me)
          copyBytes(staging + base + (rt.recvBegin[q] * rowBytes),
                    byteAt(a.expertTokens, rt.recvBegin[q] * rowBytes),
                    rt.recvRowsFrom(q) * rowBytes);
    } else {
      sumSlots(rt, a, rowBytes, staging + base, /*skipOrigin=*/me);
    }
  }
  RowSource own;
  if (flat) {
    own.rows = byteAt(a.expertTokens, rt.recvBegin[me] * rowBytes);
  } else {
    own.slots = static_cast<const char*>(a.expertTokens);
    own.slotOf = rt.slotOf.data() + (rt.recvBegin[me] * K);
    own.slotWeights = a.weighted ? rt.slotWeights.data() : nullptr;
  }
  const CombineArgs args = a;
  exchangeStaging(b, CollKind::kMoeCombine, g, which, a.hidden, g.config.combineType(),
                  /*holdUntilRead=*/fromOutputs,
                  [routing, args, rowBytes, own](ScheduleBuilder& later) {
                    return sumTokens(later, *routing, args, rowBytes, own);
                  });
  return Status::ok();
}

}  // namespace trnccl::moe
