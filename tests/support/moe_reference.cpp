// The TokenSwitch tests' serial reference and the step they all run (moe_reference.hpp).
#include "support/moe_reference.hpp"

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>

#include "support/sweep.hpp"

namespace trnccl::testing {

void storeValue(trncclDataType_t t, void* base, size_t i, float v) {
  if (t == trncclFloat64) {
    static_cast<double*>(base)[i] = v;
  } else if (t == trncclFloat32) {
    static_cast<float*>(base)[i] = v;
  } else if (t == trncclFloat16) {
    _Float16 h = static_cast<_Float16>(v);
    std::memcpy(static_cast<char*>(base) + 2 * i, &h, 2);
  } else {  // bf16: the values used are exact, so truncation is the conversion
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    uint16_t top = static_cast<uint16_t>(bits >> 16);
    std::memcpy(static_cast<char*>(base) + 2 * i, &top, 2);
  }
}
float loadValue(trncclDataType_t t, const void* base, size_t i) {
  if (t == trncclFloat64) return static_cast<float>(static_cast<const double*>(base)[i]);
  if (t == trncclFloat32) return static_cast<const float*>(base)[i];
  if (t == trncclFloat16) {
    _Float16 h;
    std::memcpy(&h, static_cast<const char*>(base) + 2 * i, 2);
    return static_cast<float>(h);
  }
  uint16_t top;
  std::memcpy(&top, static_cast<const char*>(base) + 2 * i, 2);
  uint32_t bits = static_cast<uint32_t>(top) << 16;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

std::vector<int64_t> routingOf(int rank, const Shape& s, uint64_t salt) {
  std::mt19937_64 rng(salt * 7919 + rank * 104729 + s.T * 31 + s.K);
  std::vector<int64_t> idx(s.T * s.K, -1);
  for (size_t t = 0; t < s.T; ++t) {
    std::vector<int64_t> experts(s.E);
    for (int e = 0; e < s.E; ++e) experts[e] = e;
    std::shuffle(experts.begin(), experts.end(), rng);
    if (s.skew) std::swap(experts[0], *std::find(experts.begin(), experts.end(), 0));
    for (int k = 0; k < s.K; ++k) {
      // about one entry in six is -1 (no expert), never all of a token's in the skewed case
      bool none = rng() % 6 == 0 && !(s.skew && k == 0);
      idx[t * s.K + k] = none ? -1 : experts[k];
    }
  }
  return idx;
}
float tokenValue(int rank, size_t t, size_t h) {
  return static_cast<float>(static_cast<int>((rank * 7 + t * 3 + h) % 5) - 2);  // -2..2
}
float weightOf(int rank, size_t t, int k) {
  static const float kWeights[] = {0.5f, 1.0f, 2.0f};
  return kWeights[(rank + t + k) % 3];
}
float expertScale(int id) {
  return static_cast<float>(id % 2 + 1);  // the experts below multiply by 1 or 2
}

std::vector<Slot> expectedReceive(int me, int n, const Shape& s, uint64_t salt, bool flat) {
  const int L = s.E / n;
  std::vector<Slot> flatRows;
  std::vector<std::vector<Slot>> zones(L);
  for (int q = 0; q < n; ++q) {
    auto idx = routingOf(q, s, salt);
    for (size_t t = 0; t < s.T; ++t) {
      Slot row{q, t, {}, {}};
      std::vector<std::pair<int64_t, int>> mine;
      for (int k = 0; k < s.K; ++k) {
        int64_t id = idx[t * s.K + k];
        if (id >= me * L && id < (me + 1) * L) mine.emplace_back(id - me * L, k);
      }
      std::sort(mine.begin(), mine.end());
      for (auto [local, k] : mine) {
        row.ids.push_back(local);
        row.weights.push_back(weightOf(q, t, k));
        zones[local].push_back({q, t, {local}, {weightOf(q, t, k)}});
      }
      if (!mine.empty()) flatRows.push_back(row);
    }
  }
  if (flat) return flatRows;
  std::vector<Slot> slots;
  for (auto& zone : zones) slots.insert(slots.end(), zone.begin(), zone.end());
  return slots;
}

float expectedCombined(int me, int n, const Shape& s, const std::vector<int64_t>& idx, size_t t,
                       size_t h, bool flat, bool weighted) {
  const int L = s.E / n;
  const float x = tokenValue(me, t, h);
  float sum = 0;
  std::vector<bool> seen(n, false);
  for (int k = 0; k < s.K; ++k) {
    int64_t id = idx[t * s.K + k];
    if (id < 0) continue;
    int dest = static_cast<int>(id / L);
    if (flat) {
      if (!seen[dest]) sum += x * expertScale(dest);
      seen[dest] = true;
    } else {
      sum += x * expertScale(static_cast<int>(id % L)) * (weighted ? weightOf(me, t, k) : 1.0f);
    }
  }
  return sum;
}

trncclEpRouting_t createRouting(Failures& f, trncclEpGroup_t group, const std::vector<int64_t>& idx,
                                const Shape& s, trncclEpLayout_t layout, const std::string& what) {
  trncclEpRouting_t routing = nullptr;
  if (trncclEpCreateRouting(group, idx.data(), trncclInt64, s.T, s.K, layout, &routing) ==
      trncclSuccess)
    return routing;
  f.add("%s%screate routing failed: %s", what.c_str(), what.empty() ? "" : ": ",
        trncclGetLastError(nullptr));
  return nullptr;
}

void checkCombine(Failures& f, trncclEpRouting_t routing, const void* expertOut, int me, int n,
                  const Shape& s, const std::vector<int64_t>& idx, trncclDataType_t type, bool flat,
                  const std::string& what) {
  const size_t rowBytes = s.H * typeSize(type);
  for (int weighted = 0; weighted <= (flat ? 0 : 1); ++weighted) {
    Guarded combined(s.T * rowBytes, 0x22);
    if (trncclEpCombine(routing, expertOut, s.H, combined.ptr(), weighted) != trncclSuccess) {
      f.add("%s: combine (weighted=%d) failed: %s", what.c_str(), weighted,
            trncclGetLastError(nullptr));
      continue;
    }
    for (size_t t = 0, bad = 0; t < s.T && bad < 3; ++t)
      for (size_t h = 0; h < s.H; ++h) {
        const float got = loadValue(type, combined.ptr(), t * s.H + h);
        const float expect = expectedCombined(me, n, s, idx, t, h, flat, weighted);
        if (got != expect) {
          f.add("%s: combine (weighted=%d) token %zu element %zu = %g, want %g", what.c_str(),
                weighted, t, h, got, expect);
          ++bad;
          break;
        }
      }
    if (!combined.guardIntact()) f.add("%s: combine wrote past out", what.c_str());
  }
}

void runStep(Failures& f, trncclEpGroup_t group, int me, int n, const Shape& s,
             trncclDataType_t type, trncclEpLayout_t layout, bool async, uint64_t salt,
             size_t worst) {
  const bool flat = layout == trncclEpLayoutFlat;
  const std::string what = std::string(worst ? "low-latency " : "") + "T=" + std::to_string(s.T) +
                           " K=" + std::to_string(s.K) + " E=" + std::to_string(s.E) +
                           (flat ? " flat" : " expert_major") + (s.skew ? " skewed" : "") +
                           " type=" + std::to_string(type);
  auto idx = routingOf(me, s, salt);
  trncclEpRouting_t routing = createRouting(f, group, idx, s, layout, what);
  if (!routing) return;
  const auto want = expectedReceive(me, n, s, salt, flat);
  const int L = s.E / n;
  size_t numRecv = 0;
  std::vector<int32_t> perExpert(L, -1);
  auto checkCounts = [&] {
    if (trncclEpRoutingGetCounts(routing, &numRecv, perExpert.data(), L) != trncclSuccess)
      f.add("%s: get counts failed: %s", what.c_str(), trncclGetLastError(nullptr));
    if (numRecv != want.size())
      f.add("%s: rank %d receives %zu, reference %zu", what.c_str(), me, numRecv, want.size());
    std::vector<int32_t> wantPerExpert(L, 0);
    for (const Slot& slot : want)
      for (int64_t id : slot.ids) ++wantPerExpert[id];
    if (perExpert != wantPerExpert) f.add("%s: per-expert counts differ", what.c_str());
  };
  if (!worst)
    checkCounts();
  else if (trncclEpRoutingGetCounts(routing, &numRecv, nullptr, 0) != trncclInvalidUsage)
    f.add("%s: low-latency counts were available before the dispatch", what.c_str());

  const size_t es = typeSize(type), rowBytes = s.H * es;
  std::vector<char> tokens(s.T * rowBytes);
  std::vector<float> weights(s.T * s.K);
  for (size_t t = 0; t < s.T; ++t) {
    for (size_t h = 0; h < s.H; ++h)
      storeValue(type, tokens.data(), t * s.H + h, tokenValue(me, t, h));
    for (int k = 0; k < s.K; ++k) weights[t * s.K + k] = weightOf(me, t, k);
  }
  // Room past the end, checked untouched below.
  const size_t capacity = (worst ? worst : want.size()) + 2;
  Guarded outTokens(capacity * rowBytes, 0x11);
  std::vector<float> outWeights(capacity * (flat ? s.K : 1), -7.0f);
  std::vector<int64_t> outIdx(capacity * s.K, -7);
  trncclResult_t rc;
  if (async) {
    trncclRequest_t request = nullptr;
    rc = trncclEpDispatchAsync(routing, tokens.data(), s.H, weights.data(), outTokens.ptr(),
                               outWeights.data(), flat ? outIdx.data() : nullptr, capacity,
                               &request);
    if (rc == trncclSuccess) rc = trncclWait(&request, TRNCCL_TIMEOUT_DEFAULT);
  } else {
    rc = trncclEpDispatch(routing, tokens.data(), s.H, weights.data(), outTokens.ptr(),
                          outWeights.data(), flat ? outIdx.data() : nullptr, capacity);
  }
  if (rc != trncclSuccess) {
    f.add("%s: dispatch failed: %s", what.c_str(), trncclGetLastError(nullptr));
    trncclEpRoutingDestroy(routing);
    return;
  }
  if (worst) checkCounts();
  int reported = 0;
  for (size_t j = 0; j < want.size() && reported < 3; ++j) {
    const Slot& slot = want[j];
    for (size_t h = 0; h < s.H; ++h) {
      float got = loadValue(type, outTokens.ptr(), j * s.H + h);
      if (got != tokenValue(slot.src, slot.token, h)) {
        f.add("%s: row %zu (rank %d token %zu) element %zu = %g, want %g", what.c_str(), j,
              slot.src, slot.token, h, got, tokenValue(slot.src, slot.token, h));
        ++reported;
        break;
      }
    }
    if (flat) {
      for (int k = 0; k < s.K; ++k) {
        const bool used = k < static_cast<int>(slot.ids.size());
        const int64_t wantId = used ? slot.ids[k] : -1;
        const float wantWeight = used ? slot.weights[k] : 0.0f;
        if (outIdx[j * s.K + k] != wantId || outWeights[j * s.K + k] != wantWeight) {
          f.add("%s: row %zu entry %d: id %lld weight %g, want %lld %g", what.c_str(), j, k,
                static_cast<long long>(outIdx[j * s.K + k]), outWeights[j * s.K + k],
                static_cast<long long>(wantId), wantWeight);
          ++reported;
          break;
        }
      }
    } else if (outWeights[j] != slot.weights[0]) {
      f.add("%s: slot %zu weight %g, want %g", what.c_str(), j, outWeights[j], slot.weights[0]);
      ++reported;
    }
  }
  for (size_t b = want.size() * rowBytes; b < capacity * rowBytes; ++b)
    if (outTokens.data[b] != 0x11) {
      f.add("%s: dispatch wrote past the received rows", what.c_str());
      break;
    }
  if (!outTokens.guardIntact()) f.add("%s: dispatch wrote past outTokens", what.c_str());

  // The experts: flat rows times the scale of this rank, expert-major slots times their
  // expert's. Combine, unweighted and (expert-major) weighted.
  // Never empty: a low-latency combine requires the buffer whatever arrived.
  std::vector<char> expertOut(std::max<size_t>(1, want.size()) * rowBytes);
  for (size_t j = 0; j < want.size(); ++j) {
    const float scale = flat ? expertScale(me) : expertScale(static_cast<int>(want[j].ids[0]));
    for (size_t h = 0; h < s.H; ++h)
      storeValue(type, expertOut.data(), j * s.H + h,
                 loadValue(type, outTokens.ptr(), j * s.H + h) * scale);
  }
  checkCombine(f, routing, expertOut.data(), me, n, s, idx, type, flat, what);
  trncclEpRoutingDestroy(routing);
}

trncclEpGroup_t makeGroup(Failures& f, trncclComm_t comm, int n, int E, int maxTokens,
                          trncclDataType_t type, size_t H, trncclEpMode_t mode) {
  trncclEpConfig_t config = TRNCCL_EP_CONFIG_INITIALIZER;
  config.numExperts = E;
  config.maxDispatchTokensPerRank = maxTokens;
  config.maxRecvTokensPerRank = maxTokens * n * 8;  // every pair could land on one rank
  config.maxTokenBytes = H * typeSize(type);
  config.payloadType = type;
  config.mode = mode;
  trncclEpGroup_t group = nullptr;
  if (trncclEpGroupCreate(comm, &config, &group) != trncclSuccess)
    f.add("group create failed: %s", trncclGetLastError(comm));
  return group;
}

// Emulated nodes (2 per job, alternating ranks): shm inside a node, efa over loopback between.
void setupLayout(const std::string& layout, int rank) {
  setenv("FI_TCP_IFACE", "lo", 1);
  setenv("FI_NET_IFACE", "lo", 1);
  // shm: one node, rows read from peers' mapped staging (direct); rings: the same over the
  // shm transport's rings. nodes: the hierarchical mode forwards rows inside a node through
  // mapped staging; nodes_rings: over the shm transport.
  if (layout == "rings" || layout == "nodes_rings") setenv("TRNCCL_MOE_DIRECT", "0", 1);
  if (layout == "nodes" || layout == "nodes_rings")
    setenv("TRNCCL_HOSTID", rank % 2 ? "node-b" : "node-a", 1);
  // Three nodes of uneven size (5 ranks: 2, 2, 1): proxies wrap around the smaller node.
  if (layout == "nodes3") setenv("TRNCCL_HOSTID", ("node-" + std::to_string(rank % 3)).c_str(), 1);
}

std::string lastErrorOf(trncclComm_t comm) {
  const char* text = trncclGetLastError(comm);
  return text ? text : "";
}

void expectError(Failures& f, const char* what, trncclResult_t rc, trncclResult_t want,
                 const std::string& message, const std::vector<std::string>& mentions) {
  if (rc != want) f.add("%s: result %d, want %d (%s)", what, rc, want, message.c_str());
  for (const auto& needle : mentions)
    if (message.find(needle) == std::string::npos)
      f.add("%s: message lacks '%s': %s", what, needle.c_str(), message.c_str());
}

}  // namespace trnccl::testing
