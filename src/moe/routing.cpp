// The layout step and the exchange that fixes a routing. Locally: which ranks each token goes
// to (one packed row per destination rank, however many of its experts live there) and which
// of its top-k each row carries. Then an all-gather of every rank's header (its status,
// layout, top-k and rows and pairs per destination), so that a bad argument or a receive
// overflow anywhere fails the call on every rank with the same message before any token moves;
// and each row's local expert ids reach the rank that receives the row, so that the expert side
// knows its zones before the first dispatch: as bit masks in the same header when the group's
// worst case is small (idMaskWords), else by an all-to-all-v of their own.
#include <algorithm>
#include <numeric>

#include "core/dtype.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "core/strformat.hpp"
#include "moe/ep_group.hpp"

namespace trnccl::moe {
namespace {

constexpr uint64_t kHeaderFixed = 4;  // status, layout, topk, numTokens; then rows[n], pairs[n]

const char* layoutName(trncclEpLayout_t layout) {
  return layout == trncclEpLayoutFlat ? "flat" : "expert_major";
}

struct LocalLayout {
  std::vector<uint64_t> rowsTo, pairsTo;
};

Status checkArguments(const EpGroup& g, const void* idx, trncclDataType_t idxType, size_t numTokens,
                      int topk, trncclEpLayout_t layout) {
  const int r = g.rank();
  if (layout != trncclEpLayoutFlat && layout != trncclEpLayoutExpertMajor)
    return makeError(Code::kInvalidArgument,
                     "rank %d trncclEpCreateRouting: layout %d is neither trncclEpLayoutFlat nor "
                     "trncclEpLayoutExpertMajor",
                     r, static_cast<int>(layout));
  if (idxType != trncclInt32 && idxType != trncclInt64)
    return makeError(Code::kInvalidArgument,
                     "rank %d trncclEpCreateRouting: topk ids must be trncclInt32 or trncclInt64, "
                     "not %s",
                     r, dtypeName(idxType));
  if (topk < 1 || topk > g.config.numExperts || topk > INT16_MAX)
    return makeError(Code::kInvalidArgument,
                     "rank %d trncclEpCreateRouting: topk=%d must be between 1 and num_experts "
                     "(%d)",
                     r, topk, g.config.numExperts);
  if (numTokens > static_cast<size_t>(g.config.maxDispatchTokens))
    return makeError(Code::kInvalidArgument,
                     "rank %d trncclEpCreateRouting: %zu tokens exceed the group's "
                     "maxDispatchTokensPerRank (max_dispatch_tokens_per_rank) of %d; create the "
                     "group with a larger one",
                     r, numTokens, g.config.maxDispatchTokens);
  if (numTokens > 0 && !idx)
    return makeError(Code::kInvalidArgument,
                     "rank %d trncclEpCreateRouting: topkIdx is NULL with %zu tokens", r,
                     numTokens);
  return Status::ok();
}

// One token's valid (id, k) pairs, ascending by id; an out-of-range or repeated id is an error.
Status tokenExperts(const EpGroup& g, const void* idx, trncclDataType_t type, size_t t, int topk,
                    std::vector<std::pair<int64_t, int>>* pairs) {
  pairs->clear();
  for (int k = 0; k < topk; ++k) {
    int64_t id = expertIdAt(idx, type, t * topk + k);
    if (id == -1) continue;
    if (id < 0 || id >= g.config.numExperts)
      return makeError(Code::kInvalidArgument,
                       "rank %d trncclEpCreateRouting: topk_idx[%zu][%d] = %lld is not an expert "
                       "id (0..%d, or -1 for none)",
                       g.rank(), t, k, static_cast<long long>(id), g.config.numExperts - 1);
    pairs->emplace_back(id, k);
  }
  std::sort(pairs->begin(), pairs->end());
  for (size_t i = 1; i < pairs->size(); ++i)
    if ((*pairs)[i].first == (*pairs)[i - 1].first)
      return makeError(Code::kInvalidArgument,
                       "rank %d trncclEpCreateRouting: token %zu names expert %lld twice "
                       "(topk_idx[%zu][%d] and [%d]); each of a token's top-k must differ",
                       g.rank(), t, static_cast<long long>((*pairs)[i].first), t,
                       (*pairs)[i - 1].second, (*pairs)[i].second);
  return Status::ok();
}

// Two passes over the tokens: count rows and pairs per destination, then fill the packed rows
// in destination-then-token order.
Status buildOrigin(const EpGroup& g, const void* idx, trncclDataType_t type, Routing* routing,
                   LocalLayout* out) {
  const int n = g.nranks(), L = g.localExperts, K = routing->topk;
  const size_t T = routing->numTokens;
  out->rowsTo.assign(n, 0);
  out->pairsTo.assign(n, 0);
  std::vector<std::pair<int64_t, int>> pairs;
  for (size_t t = 0; t < T; ++t) {
    TRNCCL_RETURN_IF_ERROR(tokenExperts(g, idx, type, t, K, &pairs));
    int last = -1;
    for (const auto& [id, k] : pairs) {
      const int q = static_cast<int>(id / L);
      if (q != last) ++out->rowsTo[q];
      ++out->pairsTo[q];
      last = q;
    }
  }
  routing->sendBegin.assign(n + 1, 0);
  for (int q = 0; q < n; ++q) routing->sendBegin[q + 1] = routing->sendBegin[q] + out->rowsTo[q];
  const size_t rows = routing->sendBegin[n];
  routing->rowToken.resize(rows);
  routing->rowK.assign(rows * K, -1);
  routing->sendIds.assign(rows * K, -1);
  routing->tokenBegin.assign(T + 1, 0);
  routing->tokenRows.resize(rows);
  std::vector<size_t> cursor(routing->sendBegin.begin(), routing->sendBegin.end() - 1);
  size_t tokenCursor = 0;
  for (size_t t = 0; t < T; ++t) {
    TRNCCL_RETURN_IF_ERROR(tokenExperts(g, idx, type, t, K, &pairs));
    int last = -1, slot = 0;
    size_t row = 0;
    for (const auto& [id, k] : pairs) {
      const int q = static_cast<int>(id / L);
      if (q != last) {
        row = cursor[q]++;
        routing->rowToken[row] = static_cast<uint32_t>(t);
        routing->tokenRows[tokenCursor++] = static_cast<uint32_t>(row);
        slot = 0;
        last = q;
      }
      routing->rowK[row * K + slot] = static_cast<int16_t>(k);
      routing->sendIds[row * K + slot] = static_cast<int32_t>(id % L);
      ++slot;
    }
    routing->tokenBegin[t + 1] = tokenCursor;
  }
  return Status::ok();
}

std::string countsText(const std::vector<uint64_t>& counts) {
  std::string text;
  for (size_t q = 0; q < counts.size() && q < 16; ++q)
    text += strformat("%s%llu", q ? "," : "", static_cast<unsigned long long>(counts[q]));
  return counts.size() > 16 ? text + ",..." : text;
}

CollArgs gatherArgs(const uint64_t* mine, uint64_t* all, size_t words) {
  CollArgs a;
  a.kind = CollKind::kAllGather;
  a.sendbuff = mine;
  a.recvbuff = all;
  a.count = words;
  a.dtype = trncclUint64;
  return a;
}

// The routing header's words for every row's local experts, as a bit mask of the destination's
// localExperts per row (a row's local ids are ascending, so the mask is the id list), when a
// batch at the group's worst case keeps them small: maxDispatchTokensPerRank tokens make at most
// that many rows per rank of the n, localExperts bits each, numExperts bits per token in all.
// Else 0, and the ids take an all-to-all-v of their own. One collective instead of two: with
// more ranks than cores every synchronisation costs a scheduling turn of every rank. The width
// depends only on the group's configuration, which every rank shares (checked at creation).
// Not for the hierarchical mode (its ids go through the proxies).
constexpr size_t kIdMaskMaxWords = 1024;           // per rank
constexpr size_t kIdMaskMaxGatheredWords = 32768;  // all ranks' together (256 KiB)
size_t idMaskWords(const EpGroup& g) {
  if (g.hierarchical) return 0;
  const size_t bits = static_cast<size_t>(g.config.maxDispatchTokens) *
                      static_cast<size_t>(g.localExperts) * static_cast<size_t>(g.nranks());
  const size_t words = (bits + 63) / 64;
  return words <= kIdMaskMaxWords && words * g.nranks() <= kIdMaskMaxGatheredWords ? words : 0;
}

// Rows' local ids (topk each, -1 after the last) into bits (L per row) and back.
void maskIds(const std::vector<int32_t>& ids, int topk, int L, uint64_t* mask) {
  const size_t rows = ids.size() / topk;
  for (size_t row = 0; row < rows; ++row)
    for (int k = 0; k < topk && ids[row * topk + k] >= 0; ++k) {
      const size_t bit = (row * L) + ids[row * topk + k];
      mask[bit / 64] |= uint64_t{1} << (bit % 64);
    }
}
void unmaskIds(const uint64_t* mask, size_t firstRow, size_t rows, int topk, int L, int32_t* ids) {
  for (size_t i = 0; i < rows; ++i) {
    int k = 0;
    for (int id = 0; id < L; ++id) {
      const size_t bit = ((firstRow + i) * L) + id;
      if (mask[bit / 64] >> (bit % 64) & 1) ids[(i * topk) + k++] = id;
    }
  }
}

void logNormalRouting(const EpGroup& g, const Routing& routing, const LocalLayout& local,
                      const char* idsHow) {
  if (!log::enabled(log::Level::kInfo, log::kMoe)) return;
  const int n = g.nranks();
  uint64_t pairs = 0;
  for (uint64_t p : local.pairsTo) pairs += p;
  const size_t rows = routing.sendBegin[n];
  TRNCCL_INFO(log::kMoe,
              "%s rank %d: EP routing, mode normal (one exchange between every pair of ranks, "
              "rows %s; local ids %s), layout %s: %zu tokens x top-%d -> %llu token-expert "
              "pairs in %zu rows (%llu duplicates removed); rows per destination rank [%s]; "
              "receives %zu rows, %zu slots",
              g.comm->name().c_str(), g.rank(),
              g.direct ? "read from peers' mapped staging" : "over the transports", idsHow,
              layoutName(routing.layout), routing.numTokens, routing.topk,
              static_cast<unsigned long long>(pairs), rows,
              static_cast<unsigned long long>(pairs - rows), countsText(local.rowsTo).c_str(),
              routing.recvRows(), routing.recvSlots());
}

// Low latency: no exchange now; the first dispatch carries the counts and ids. Outputs must
// hold the worst case, which the group's capacity was checked against.
Result<std::shared_ptr<Routing>> finishLowLatency(const EpGroup& g,
                                                  const std::shared_ptr<Routing>& routing,
                                                  const LocalLayout& local, Status status) {
  if (!status.isOk()) return status;
  const int n = g.nranks();
  const bool flat = routing->layout == trncclEpLayoutFlat;
  const uint64_t worst = static_cast<uint64_t>(n) * g.config.maxDispatchTokens *
                         (flat ? 1 : std::min(routing->topk, g.localExperts));
  if (worst > static_cast<uint64_t>(g.config.maxRecvTokens))
    return makeError(Code::kInvalidArgument,
                     "rank %d trncclEpCreateRouting: the low-latency mode's expert-major "
                     "outputs hold the worst case, nranks x maxDispatchTokensPerRank x "
                     "min(topk, experts per rank) = %llu slots, but maxRecvTokensPerRank "
                     "(max_recv_tokens_per_rank) is %d; raise it, use the flat layout or "
                     "trncclEpModeNormal",
                     g.rank(), static_cast<unsigned long long>(worst), g.config.maxRecvTokens);
  routing->lowLatency = true;
  routing->lowLatencyCapacity = worst;
  routing->recvBegin.assign(n + 1, 0);
  TRNCCL_INFO(log::kMoe,
              "%s rank %d: EP routing, mode low latency (no count exchange: the dispatch "
              "carries counts and ids), layout %s: %zu tokens x top-%d in %zu rows; rows per "
              "destination rank [%s]",
              g.comm->name().c_str(), g.rank(), layoutName(routing->layout), routing->numTokens,
              routing->topk, routing->sendBegin[n], countsText(local.rowsTo).c_str());
  return routing;
}

}  // namespace

// The expert side's zones from the received ids.
void buildExpertSide(Routing* routing) {
  const int L = routing->group->localExperts, K = routing->topk;
  const size_t rows = routing->recvRows();
  routing->perExpert.assign(L, 0);
  for (int32_t id : routing->recvIds)
    if (id >= 0) ++routing->perExpert[id];
  routing->slotOf.clear();
  routing->expertSideReady = true;
  if (routing->layout != trncclEpLayoutExpertMajor) return;
  std::vector<int64_t> next(L, 0);
  for (int e = 1; e < L; ++e) next[e] = next[e - 1] + routing->perExpert[e - 1];
  routing->slotOf.assign(rows * K, -1);
  for (size_t j = 0; j < rows; ++j)
    for (int i = 0; i < K && routing->recvIds[j * K + i] >= 0; ++i)
      routing->slotOf[j * K + i] = next[routing->recvIds[j * K + i]]++;
}

size_t Routing::recvSlots() const {
  size_t slots = 0;
  for (int32_t pairs : perExpert) slots += pairs;
  return slots;
}

Result<std::shared_ptr<EpGroup>> createGroup(std::shared_ptr<Communicator> comm,
                                             const EpConfig& config) {
  const int r = comm->rank(), n = comm->nranks();
  Status local;
  if (config.numExperts <= 0 || config.numExperts % n != 0)
    local = makeError(Code::kInvalidArgument,
                      "rank %d trncclEpGroupCreate: numExperts=%d must be a positive multiple of "
                      "the communicator's %d ranks (each rank owns numExperts / nranks experts)",
                      r, config.numExperts, n);
  else if (config.maxDispatchTokens < 0 || config.maxRecvTokens < config.maxDispatchTokens)
    local = makeError(Code::kInvalidArgument,
                      "rank %d trncclEpGroupCreate: maxRecvTokensPerRank=%d must be at least "
                      "maxDispatchTokensPerRank=%d (and neither negative)",
                      r, config.maxRecvTokens, config.maxDispatchTokens);
  else if (config.payload != trncclBfloat16 && config.payload != trncclFloat16 &&
           config.payload != trncclFloat32 && config.payload != trncclFloat64 && !config.fp8())
    local = makeError(Code::kInvalidArgument,
                      "rank %d trncclEpGroupCreate: payload type %s is not supported (bf16, fp16, "
                      "fp32, fp64, or fp8 e4m3/e5m2 with per-token scales)",
                      r, dtypeName(config.payload));
  else if (config.mode < trncclEpModeAuto || config.mode > trncclEpModeHierarchical)
    local = makeError(Code::kInvalidArgument,
                      "rank %d trncclEpGroupCreate: mode %d is not a trncclEpMode_t", r,
                      static_cast<int>(config.mode));
  else if (config.mode == trncclEpModeLowLatency &&
           static_cast<int64_t>(config.maxRecvTokens) <
               static_cast<int64_t>(n) * config.maxDispatchTokens)
    local =
        makeError(Code::kInvalidArgument,
                  "rank %d trncclEpGroupCreate: the low-latency mode receives up to nranks x "
                  "maxDispatchTokensPerRank = %lld rows per rank without a count exchange, "
                  "but maxRecvTokensPerRank is %d; raise it or use trncclEpModeNormal",
                  r, static_cast<long long>(n) * config.maxDispatchTokens, config.maxRecvTokens);
  else if (config.maxTokenBytes == 0 || config.maxTokenBytes % dtypeSize(config.payload) != 0)
    local = makeError(Code::kInvalidArgument,
                      "rank %d trncclEpGroupCreate: maxTokenBytes=%zu must be a positive multiple "
                      "of the payload's element size (%zu)",
                      r, config.maxTokenBytes, dtypeSize(config.payload));
  // Direct mode (direct.cpp) where this rank maps every peer's memory and the knob allows it;
  // the group takes it only if every rank can, so that their schedules agree.
  auto directAllowed = env::getBool(env::kMoeDirect);
  if (!directAllowed.isOk() && local.isOk()) local = directAllowed.status();
  const bool directHere =
      directAllowed.isOk() && directAllowed.value() && comm->everyPeerMapsMemory();
  const bool nodeDirectHere =
      directAllowed.isOk() && directAllowed.value() && comm->everyNodePeerMapsMemory();
  // Every rank must hold the same configuration: gather everyone's and compare.
  constexpr size_t kWords = 8;
  const uint64_t mine[kWords] = {local.isOk() ? 0u : 1u,
                                 static_cast<uint64_t>(config.numExperts),
                                 static_cast<uint64_t>(config.maxDispatchTokens),
                                 static_cast<uint64_t>(config.maxRecvTokens),
                                 config.maxTokenBytes,
                                 static_cast<uint64_t>(config.payload),
                                 static_cast<uint64_t>(config.mode),
                                 (directHere ? 1u : 0u) | (nodeDirectHere ? 2u : 0u)};
  std::vector<uint64_t> all(kWords * n);
  TRNCCL_RETURN_IF_ERROR(comm->run(gatherArgs(mine, all.data(), kWords)));
  if (!local.isOk()) return local;
  for (int q = 0; q < n; ++q) {
    const uint64_t* theirs = all.data() + (kWords * q);
    if (theirs[0] != 0)
      return makeError(Code::kInvalidArgument,
                       "rank %d trncclEpGroupCreate: rank %d passed an invalid configuration "
                       "(its error says which)",
                       r, q);
    if (!std::equal(mine + 1, mine + kWords - 1, theirs + 1))
      return makeError(Code::kInvalidUsage,
                       "rank %d trncclEpGroupCreate: rank %d's configuration (numExperts=%llu, "
                       "maxDispatchTokensPerRank=%llu, maxRecvTokensPerRank=%llu, "
                       "maxTokenBytes=%llu) differs from this rank's (%d, %d, %d, %zu) or its "
                       "payload type or mode does; every rank must pass the same",
                       r, q, static_cast<unsigned long long>(theirs[1]),
                       static_cast<unsigned long long>(theirs[2]),
                       static_cast<unsigned long long>(theirs[3]),
                       static_cast<unsigned long long>(theirs[4]), config.numExperts,
                       config.maxDispatchTokens, config.maxRecvTokens, config.maxTokenBytes);
  }
  auto group = std::make_shared<EpGroup>();
  group->comm = std::move(comm);
  group->config = config;
  group->localExperts = config.numExperts / n;
  const bool worstCaseFits = static_cast<int64_t>(config.maxRecvTokens) >=
                             static_cast<int64_t>(n) * config.maxDispatchTokens;
  group->lowLatency = config.mode == trncclEpModeLowLatency ||
                      (config.mode == trncclEpModeAuto &&
                       config.maxDispatchTokens <= kLowLatencyMaxTokens && worstCaseFits);
  // Across nodes, batches past the low-latency limit take the hierarchical mode: on 2
  // emulated hosts x 2 ranks its round trip measured 54-63 ms against the normal mode's 65-73
  // (T=2048, uniform and Zipf 1.2 routing, 3 rounds; docs/PERFORMANCE.md).
  const int nodes = group->comm->topology().nnodes();
  group->hierarchical = config.mode == trncclEpModeHierarchical ||
                        (config.mode == trncclEpModeAuto && !group->lowLatency && nodes > 1);
  group->direct = true;
  group->nodeDirect = true;
  for (int q = 0; q < n; ++q) {
    group->direct = group->direct && (all[(kWords * q) + kWords - 1] & 1u) != 0;
    group->nodeDirect = group->nodeDirect && (all[(kWords * q) + kWords - 1] & 2u) != 0;
  }
  std::string why =
      config.mode != trncclEpModeAuto ? "asked for"
      : group->lowLatency
          ? "auto: decode-sized batches, and the receive capacity holds every rank's"
      : group->hierarchical
          ? "auto: the ranks span nodes, and batches are past the low-latency limit or the "
            "receive capacity is below its worst case"
          : "auto: batches past the low-latency limit, or a receive capacity below the worst case";
  // A tuning file's measured choice (trnccl-tune --moe) overrides auto's rule. Every rank holds
  // the same file (the communicator compared them at init), so every rank resolves alike.
  const CostParams& costs = group->comm->costs();
  const MoeTuning* tuned = config.mode == trncclEpModeAuto
                               ? costs.moeEntry(n, nodes, config.maxDispatchTokens)
                               : nullptr;
  if (tuned && tuned->mode == "low_latency" && !worstCaseFits) {
    why += strformat(
        " (%s line %d measured low_latency best, but maxRecvTokensPerRank=%d is "
        "below its worst case of nranks x maxDispatchTokensPerRank)",
        costs.origin.c_str(), tuned->line, config.maxRecvTokens);
  } else if (tuned) {
    group->lowLatency = tuned->mode == "low_latency";
    group->hierarchical = tuned->mode == "hierarchical";
    why = strformat("auto: %s line %d, measured on %d ranks over %d nodes at %ld tokens per rank",
                    costs.origin.c_str(), tuned->line, tuned->ranks, tuned->nodes, tuned->tokens);
  }
  TRNCCL_INFO(log::kMoe,
              "%s rank %d: EP group of %d ranks, %d experts (%d per rank), at most %d tokens "
              "out and %d in per rank, %zu-byte tokens of %s; mode %s (%s); rows between "
              "ranks %s",
              group->comm->name().c_str(), r, n, config.numExperts, group->localExperts,
              config.maxDispatchTokens, config.maxRecvTokens, config.maxTokenBytes,
              dtypeName(config.payload),
              group->lowLatency     ? "low latency"
              : group->hierarchical ? "hierarchical"
                                    : "normal",
              why.c_str(),
              group->direct ? "read from peers' mapped staging (direct, TRNCCL_MOE_DIRECT=1)"
              : group->hierarchical && group->nodeDirect
                  ? "across nodes over the transports, inside a node read from the node's "
                    "mapped staging (TRNCCL_MOE_DIRECT=1)"
              : directHere ? "over the transports (some rank cannot map its peers' memory)"
              : directAllowed.isOk() && directAllowed.value()
                  ? "over the transports (a peer is not on shm, or single copy is off on "
                    "this node: TRNCCL_CMA)"
                  : "over the transports (TRNCCL_MOE_DIRECT=0)");
  return group;
}

Result<std::shared_ptr<Routing>> createRouting(std::shared_ptr<EpGroup> group, const void* idx,
                                               trncclDataType_t idxType, size_t numTokens, int topk,
                                               trncclEpLayout_t layout) {
  const EpGroup& g = *group;
  const int r = g.rank(), n = g.nranks();
  auto routing = std::make_shared<Routing>();
  routing->group = group;
  routing->layout = layout;
  routing->numTokens = numTokens;
  routing->topk = topk;
  LocalLayout local;
  Status status = checkArguments(g, idx, idxType, numTokens, topk, layout);
  if (status.isOk()) status = buildOrigin(g, idx, idxType, routing.get(), &local);
  if (g.lowLatency) return finishLowLatency(g, routing, local, status);
  if (!status.isOk()) {  // still joins the exchange, so that every rank fails alike
    local.rowsTo.assign(n, 0);
    local.pairsTo.assign(n, 0);
  }

  // Rows per node (tokens with an expert there): what each node's proxy receives in the
  // hierarchical mode.
  const topology::Topology& topo = g.comm->topology();
  const int nodes = topo.nnodes();
  std::vector<uint64_t> rowsToNode(nodes, 0);
  if (status.isOk()) {
    std::vector<int> rowDest(routing->sendBegin[n]);
    for (int q = 0; q < n; ++q)
      for (size_t p = routing->sendBegin[q]; p < routing->sendBegin[q + 1]; ++p) rowDest[p] = q;
    std::vector<uint8_t> hit(nodes);
    for (size_t t = 0; t < numTokens; ++t) {
      std::fill(hit.begin(), hit.end(), 0);
      for (size_t i = routing->tokenBegin[t]; i < routing->tokenBegin[t + 1]; ++i)
        hit[topo.nodeOf(rowDest[routing->tokenRows[i]])] = 1;
      for (int node = 0; node < nodes; ++node) rowsToNode[node] += hit[node];
    }
  }
  const size_t nodeWord = kHeaderFixed + 2 * n, idsWord = nodeWord + nodes;
  // Small batches carry every row's local experts in the header too (idMaskWords).
  const size_t idsWords = idMaskWords(g);
  const size_t width = idsWord + idsWords;
  std::vector<uint64_t> header(width, 0), all(width * n);
  header[0] = status.isOk() ? 0 : 1;
  header[1] = static_cast<uint64_t>(layout);
  header[2] = static_cast<uint64_t>(topk);
  header[3] = numTokens;
  std::copy(local.rowsTo.begin(), local.rowsTo.end(), header.begin() + kHeaderFixed);
  std::copy(local.pairsTo.begin(), local.pairsTo.end(), header.begin() + kHeaderFixed + n);
  std::copy(rowsToNode.begin(), rowsToNode.end(), header.begin() + nodeWord);
  if (idsWords > 0 && status.isOk())
    maskIds(routing->sendIds, topk, g.localExperts, header.data() + idsWord);
  TRNCCL_RETURN_IF_ERROR(g.comm->run(gatherArgs(header.data(), all.data(), width)));
  if (!status.isOk()) return status;
  auto at = [&](int q, size_t word) { return all[q * width + word]; };
  for (int q = 0; q < n; ++q) {
    if (at(q, 0) != 0)
      return makeError(Code::kInvalidArgument,
                       "rank %d trncclEpCreateRouting: rank %d passed bad arguments (its own "
                       "error says which); no rank routes this step",
                       r, q);
    if (at(q, 1) != header[1] || at(q, 2) != header[2])
      return makeError(Code::kInvalidUsage,
                       "rank %d trncclEpCreateRouting: rank %d uses layout %s and topk=%llu, "
                       "this rank %s and %d; every rank must pass the same",
                       r, q, layoutName(static_cast<trncclEpLayout_t>(at(q, 1))),
                       static_cast<unsigned long long>(at(q, 2)), layoutName(layout), topk);
  }
  // What each rank would receive, checked against the capacity on every rank alike.
  const bool flat = layout == trncclEpLayoutFlat;
  for (int dest = 0; dest < n; ++dest) {
    uint64_t rows = 0, pairs = 0;
    for (int q = 0; q < n; ++q) {
      rows += at(q, kHeaderFixed + dest);
      pairs += at(q, kHeaderFixed + n + dest);
    }
    const uint64_t need = flat ? rows : pairs;
    if (need > static_cast<uint64_t>(g.config.maxRecvTokens))
      return makeError(
          Code::kInvalidUsage,
          "rank %d trncclEpCreateRouting: rank %d would receive %llu %s (%llu "
          "tokens, %llu token-expert pairs) but maxRecvTokensPerRank "
          "(max_recv_tokens_per_rank) is %d; nothing was sent. Raise it (at most "
          "nranks x maxDispatchTokensPerRank%s = %llu can arrive) or balance the "
          "routing",
          r, dest, static_cast<unsigned long long>(need), flat ? "rows" : "slots",
          static_cast<unsigned long long>(rows), static_cast<unsigned long long>(pairs),
          g.config.maxRecvTokens, flat ? "" : " x topk",
          static_cast<unsigned long long>(n) * g.config.maxDispatchTokens * (flat ? 1 : topk));
  }
  routing->recvBegin.assign(n + 1, 0);
  for (int q = 0; q < n; ++q)
    routing->recvBegin[q + 1] = routing->recvBegin[q] + at(q, kHeaderFixed + r);

  if (g.hierarchical) {
    routing->hierarchical = true;
    TRNCCL_RETURN_IF_ERROR(buildHierarchical(g, routing.get(), idx, idxType, all, width, nodeWord));
    return routing;
  }
  // Each row's local expert ids go to the rank that will receive the row.
  routing->recvIds.assign(routing->recvRows() * topk, -1);
  if (idsWords > 0) {
    // Rank q's rows for this rank follow its rows for the ranks before it.
    for (int q = 0; q < n; ++q) {
      uint64_t before = 0;
      for (int d = 0; d < r; ++d) before += at(q, kHeaderFixed + d);
      unmaskIds(all.data() + (q * width) + idsWord, before, routing->recvRowsFrom(q), topk,
                g.localExperts, routing->recvIds.data() + (routing->recvBegin[q] * topk));
    }
    buildExpertSide(routing.get());
    logNormalRouting(g, *routing, local, "with the routing's header");
    return routing;
  }
  CollArgs ids;
  ids.kind = CollKind::kAllToAllv;
  ids.dtype = trncclInt32;
  ids.sendbuff = routing->sendIds.data();
  ids.recvbuff = routing->recvIds.data();
  for (int q = 0; q < n; ++q) {
    ids.sendcounts.push_back(routing->sendRows(q) * topk);
    ids.sdispls.push_back(routing->sendBegin[q] * topk);
    ids.recvcounts.push_back(routing->recvRowsFrom(q) * topk);
    ids.rdispls.push_back(routing->recvBegin[q] * topk);
  }
  TRNCCL_RETURN_IF_ERROR(g.comm->run(ids));
  buildExpertSide(routing.get());
  logNormalRouting(g, *routing, local, "by an all-to-all-v after the header");
  return routing;
}

}  // namespace trnccl::moe
