// The TokenSwitch engine (trncclEp*) against a serial reference: every rank generates every
// rank's routing and tokens from the same seeds and simulates the whole exchange in its own
// process, then compares what the engine delivered. Values are small integers and weights
// powers of two, so every sum is exact in bf16, fp16 and fp32 whatever the order; a separate
// case checks that combine is bitwise reproducible on random data, where order matters.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/sweep.hpp"

using namespace trnccl::testing;

namespace {

// ---- values in the payload types, converted by the test itself ----
size_t typeSize(trncclDataType_t t) {
  return t == trncclFloat64                               ? 8
         : t == trncclFloat32                             ? 4
         : t == trncclFloat8e4m3 || t == trncclFloat8e5m2 ? 1
                                                          : 2;
}
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

// ---- one step's routing, the same on every rank ----
struct Shape {
  size_t T;  // tokens per rank
  int K, E;
  size_t H;
  bool skew;  // every token's first choice is expert 0
};

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

// ---- the serial reference of what rank `me` receives ----
struct Slot {
  int src;
  size_t token;
  std::vector<int64_t> ids;  // flat: local ids ascending; expert-major: the one id
  std::vector<float> weights;
};

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

// What combine must give token t of rank me: flat rows come back as row * scale(dest rank);
// expert-major slots as slot * scale(local id) (* weight when weighted).
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

// ---- one routing + dispatch + combine, checked ----
// worst: 0 in the normal mode; in the low-latency mode the rows or slots the outputs must hold
// (the counts are known only after the dispatch).
void runStep(Failures& f, trncclEpGroup_t group, int me, int n, const Shape& s,
             trncclDataType_t type, trncclEpLayout_t layout, bool async, uint64_t salt,
             size_t worst = 0) {
  const bool flat = layout == trncclEpLayoutFlat;
  const std::string what = std::string(worst ? "low-latency " : "") + "T=" + std::to_string(s.T) +
                           " K=" + std::to_string(s.K) + " E=" + std::to_string(s.E) +
                           (flat ? " flat" : " expert_major") + (s.skew ? " skewed" : "") +
                           " type=" + std::to_string(type);
  auto idx = routingOf(me, s, salt);
  trncclEpRouting_t routing = nullptr;
  if (trncclEpCreateRouting(group, idx.data(), trncclInt64, s.T, s.K, layout, &routing) !=
      trncclSuccess) {
    f.add("%s: create routing failed: %s", what.c_str(), trncclGetLastError(nullptr));
    return;
  }
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
  for (int weighted = 0; weighted <= (flat ? 0 : 1); ++weighted) {
    Guarded combined(s.T * rowBytes, 0x22);
    if (trncclEpCombine(routing, expertOut.data(), s.H, combined.ptr(), weighted) !=
        trncclSuccess) {
      f.add("%s: combine (weighted=%d) failed: %s", what.c_str(), weighted,
            trncclGetLastError(nullptr));
      continue;
    }
    for (size_t t = 0, bad = 0; t < s.T && bad < 3; ++t)
      for (size_t h = 0; h < s.H; ++h) {
        float got = loadValue(type, combined.ptr(), t * s.H + h);
        float expect = expectedCombined(me, n, s, idx, t, h, flat, weighted);
        if (got != expect) {
          f.add("%s: combine (weighted=%d) token %zu element %zu = %g, want %g", what.c_str(),
                weighted, t, h, got, expect);
          ++bad;
          break;
        }
      }
    if (!combined.guardIntact()) f.add("%s: combine wrote past out", what.c_str());
  }
  trncclEpRoutingDestroy(routing);
}

trncclEpGroup_t makeGroup(Failures& f, trncclComm_t comm, int n, int E, int maxTokens,
                          trncclDataType_t type, size_t H,
                          trncclEpMode_t mode = trncclEpModeNormal) {
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
  // shm transport's rings.
  if (layout == "rings") setenv("TRNCCL_MOE_DIRECT", "0", 1);
  if (layout == "nodes") setenv("TRNCCL_HOSTID", rank % 2 ? "node-b" : "node-a", 1);
  // Three nodes of uneven size (5 ranks: 2, 2, 1): proxies wrap around the smaller node.
  if (layout == "nodes3") setenv("TRNCCL_HOSTID", ("node-" + std::to_string(rank % 3)).c_str(), 1);
}

class Moe : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(Moe, DispatchAndCombineMatchTheSerialReference) {
  const auto [layout, n] = GetParam();
  auto outcomes = withComm(
      n, [&](int rank) { setupLayout(layout, rank); },
      [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
        const std::vector<trncclDataType_t> types =
            quickMode() ? std::vector<trncclDataType_t>{trncclBfloat16}
                        : std::vector<trncclDataType_t>{trncclBfloat16, trncclFloat16,
                                                        trncclFloat32, trncclFloat64};
        uint64_t salt = 1;
        for (trncclDataType_t type : types) {
          const size_t H = 39;  // odd: 2-byte rows end off a float boundary
          for (int K : {1, 2, 3, 8})
            for (trncclEpMode_t mode :
                 {trncclEpModeNormal, trncclEpModeLowLatency, trncclEpModeHierarchical}) {
              const int E = nranks * std::max(2, (K + nranks - 1) / nranks), L = E / nranks;
              trncclEpGroup_t group = makeGroup(f, comm, nranks, E, 64, type, H, mode);
              if (!group) return;
              const bool ll = mode == trncclEpModeLowLatency;
              for (trncclEpLayout_t lay : {trncclEpLayoutFlat, trncclEpLayoutExpertMajor}) {
                const size_t worst = !ll ? 0
                                     : lay == trncclEpLayoutFlat
                                         ? size_t(nranks) * 64
                                         : size_t(nranks) * 64 * std::min(K, L);
                for (size_t T : {size_t{0}, size_t{1}, size_t{37}})
                  for (bool skew : {false, true}) {
                    if (skew && T == 0) continue;
                    runStep(f, group, rank, nranks, Shape{T, K, E, H, skew}, type, lay,
                            /*async=*/(salt % 3) == 0, salt, worst);
                    ++salt;
                  }
              }
              trncclEpGroupDestroy(group);
            }
        }
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// Larger messages (rows of 4 KiB, several hundred per peer): the transports split them.
TEST_P(Moe, LargeRowsAndBitwiseReproducibleCombine) {
  const auto [layout, n] = GetParam();
  if (n < 2) GTEST_SKIP() << "needs peers";
  // Under the sanitizers (quick mode) a few rank counts stand for the rest.
  if (quickMode() && ((layout == "shm" && (n == 4 || n == 5)) || (layout == "rings" && n != 3)))
    GTEST_SKIP() << "quick mode: shm 2, 3, 8 and rings 3 cover this";
  auto outcomes = withComm(
      n, [&](int rank) { setupLayout(layout, rank); },
      [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
        for (trncclEpMode_t mode : {trncclEpModeNormal, trncclEpModeHierarchical}) {
          const Shape s{300, 4, nranks * 4, 2048, false};
          trncclEpGroup_t group = makeGroup(f, comm, nranks, s.E, 300, trncclBfloat16, s.H, mode);
          if (!group) return;
          runStep(f, group, rank, nranks, s, trncclBfloat16, trncclEpLayoutExpertMajor, false, 99);
          // Random (non-integer) expert outputs: sums round, so only a fixed order repeats.
          auto idx = routingOf(rank, s, 5);
          trncclEpRouting_t routing = nullptr;
          if (trncclEpCreateRouting(group, idx.data(), trncclInt64, s.T, s.K,
                                    trncclEpLayoutExpertMajor, &routing) != trncclSuccess) {
            f.add("create routing failed: %s", trncclGetLastError(nullptr));
            return;
          }
          size_t slots = 0;
          (void)trncclEpRoutingGetCounts(routing, &slots, nullptr, 0);
          std::vector<char> tokens(s.T * s.H * 2), received(slots * s.H * 2);
          std::vector<float> weights(s.T * s.K, 0.3f), slotWeights(slots);
          std::mt19937 rng(rank + 1);
          std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
          for (size_t i = 0; i < s.T * s.H; ++i)
            storeValue(trncclBfloat16, tokens.data(), i, uniform(rng));  // truncated: still bf16
          if (trncclEpDispatch(routing, tokens.data(), s.H, weights.data(), received.data(),
                               slotWeights.data(), nullptr, slots) != trncclSuccess)
            f.add("dispatch failed: %s", trncclGetLastError(nullptr));
          std::vector<char> first, again(s.T * s.H * 2);
          for (int run = 0; run < 5; ++run) {
            if (trncclEpCombine(routing, received.data(), s.H, again.data(), 1) != trncclSuccess)
              f.add("combine run %d failed: %s", run, trncclGetLastError(nullptr));
            if (run == 0)
              first = again;
            else if (first != again)
              f.add("combine run %d differs bitwise from run 0", run);
          }
          trncclEpRoutingDestroy(routing);
          trncclEpGroupDestroy(group);
        }
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// fp8 payloads: rows are opaque bytes that must arrive unchanged, each with its token's scale
// beside it (one per row or slot); combine takes and gives bf16.
uint8_t fp8Byte(int rank, size_t t, size_t h) {
  return static_cast<uint8_t>(rank * 31 + t * 7 + h * 13 + 1);
}
float tokenScale(int rank, size_t t) {
  return 0.25f * static_cast<float>(1 + (rank * 5 + t) % 7);
}

void runFp8Step(Failures& f, trncclEpGroup_t group, int me, int n, const Shape& s,
                trncclDataType_t type, trncclEpLayout_t layout, uint64_t salt, size_t worst) {
  const bool flat = layout == trncclEpLayoutFlat;
  const std::string what = std::string(worst ? "low-latency " : "") +
                           "fp8 type=" + std::to_string(type) + " T=" + std::to_string(s.T) +
                           " K=" + std::to_string(s.K) + (flat ? " flat" : " expert_major");
  auto idx = routingOf(me, s, salt);
  trncclEpRouting_t routing = nullptr;
  if (trncclEpCreateRouting(group, idx.data(), trncclInt64, s.T, s.K, layout, &routing) !=
      trncclSuccess) {
    f.add("%s: create routing failed: %s", what.c_str(), trncclGetLastError(nullptr));
    return;
  }
  const auto want = expectedReceive(me, n, s, salt, flat);
  std::vector<uint8_t> tokens(s.T * s.H);
  std::vector<float> scales(s.T), weights(s.T * s.K);
  for (size_t t = 0; t < s.T; ++t) {
    for (size_t h = 0; h < s.H; ++h) tokens[t * s.H + h] = fp8Byte(me, t, h);
    scales[t] = tokenScale(me, t);
    for (int k = 0; k < s.K; ++k) weights[t * s.K + k] = weightOf(me, t, k);
  }
  const size_t capacity = (worst ? worst : want.size()) + 2;
  Guarded outTokens(capacity * s.H, 0x11);
  std::vector<float> outScales(capacity, -7.0f), outWeights(capacity * (flat ? s.K : 1));
  std::vector<int64_t> outIdx(capacity * s.K);
  trncclRequest_t request = nullptr;
  trncclResult_t rc = trncclEpDispatchScaledAsync(
      routing, tokens.data(), scales.data(), s.H, weights.data(), outTokens.ptr(), outScales.data(),
      outWeights.data(), flat ? outIdx.data() : nullptr, capacity, &request);
  if (rc == trncclSuccess) rc = trncclWait(&request, TRNCCL_TIMEOUT_DEFAULT);
  if (rc != trncclSuccess) {
    f.add("%s: dispatch failed: %s", what.c_str(), trncclGetLastError(nullptr));
    trncclEpRoutingDestroy(routing);
    return;
  }
  size_t numRecv = 0;
  (void)trncclEpRoutingGetCounts(routing, &numRecv, nullptr, 0);
  if (numRecv != want.size())
    f.add("%s: rank %d receives %zu, reference %zu", what.c_str(), me, numRecv, want.size());
  int reported = 0;
  for (size_t j = 0; j < want.size() && reported < 3; ++j) {
    const Slot& slot = want[j];
    for (size_t h = 0; h < s.H; ++h)
      if (static_cast<uint8_t>(outTokens.data[j * s.H + h]) != fp8Byte(slot.src, slot.token, h)) {
        f.add("%s: row %zu (rank %d token %zu) byte %zu differs", what.c_str(), j, slot.src,
              slot.token, h);
        ++reported;
        break;
      }
    if (outScales[j] != tokenScale(slot.src, slot.token)) {
      f.add("%s: row %zu scale %g, want %g", what.c_str(), j, outScales[j],
            tokenScale(slot.src, slot.token));
      ++reported;
    }
    const float wantWeight = slot.weights[0];
    if (outWeights[j * (flat ? s.K : 1)] != wantWeight) {
      f.add("%s: row %zu first weight %g, want %g", what.c_str(), j,
            outWeights[j * (flat ? s.K : 1)], wantWeight);
      ++reported;
    }
  }
  for (size_t j = want.size(); j < capacity; ++j)
    if (outScales[j] != -7.0f) f.add("%s: a scale written past the received rows", what.c_str());
  for (size_t b = want.size() * s.H; b < capacity * s.H; ++b)
    if (outTokens.data[b] != 0x11) {
      f.add("%s: dispatch wrote past the received rows", what.c_str());
      break;
    }
  if (!outTokens.guardIntact()) f.add("%s: dispatch wrote past outTokens", what.c_str());

  // The experts (bf16): the dequantized rows' reference values times their expert's scale.
  std::vector<char> expertOut(std::max<size_t>(1, want.size()) * s.H * 2);
  for (size_t j = 0; j < want.size(); ++j) {
    const float scale = flat ? expertScale(me) : expertScale(static_cast<int>(want[j].ids[0]));
    for (size_t h = 0; h < s.H; ++h)
      storeValue(trncclBfloat16, expertOut.data(), j * s.H + h,
                 tokenValue(want[j].src, want[j].token, h) * scale);
  }
  for (int weighted = 0; weighted <= (flat ? 0 : 1); ++weighted) {
    Guarded combined(s.T * s.H * 2, 0x22);
    if (trncclEpCombine(routing, expertOut.data(), s.H, combined.ptr(), weighted) !=
        trncclSuccess) {
      f.add("%s: combine failed: %s", what.c_str(), trncclGetLastError(nullptr));
      continue;
    }
    for (size_t t = 0, bad = 0; t < s.T && bad < 3; ++t)
      for (size_t h = 0; h < s.H; ++h) {
        const float got = loadValue(trncclBfloat16, combined.ptr(), t * s.H + h);
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
  trncclEpRoutingDestroy(routing);
}

TEST_P(Moe, Fp8RowsTravelWithTheirScalesAndCombineInBf16) {
  const auto [layout, n] = GetParam();
  auto outcomes = withComm(
      n, [&](int rank) { setupLayout(layout, rank); },
      [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
        uint64_t salt = 500;
        // The engine never looks inside fp8 bytes: under the sanitizers (quick mode) one type.
        const std::vector<trncclDataType_t> types =
            quickMode() ? std::vector<trncclDataType_t>{trncclFloat8e4m3}
                        : std::vector<trncclDataType_t>{trncclFloat8e4m3, trncclFloat8e5m2};
        for (trncclDataType_t type : types)
          for (trncclEpMode_t mode :
               {trncclEpModeNormal, trncclEpModeLowLatency, trncclEpModeHierarchical}) {
            const int K = type == trncclFloat8e4m3 ? 3 : 1;
            const int E = nranks * std::max(2, (K + nranks - 1) / nranks), L = E / nranks;
            const size_t H = 37;  // the scale after each row sits past 3 bytes of padding
            trncclEpGroup_t group = makeGroup(f, comm, nranks, E, 64, type, H, mode);
            if (!group) return;
            for (trncclEpLayout_t lay : {trncclEpLayoutFlat, trncclEpLayoutExpertMajor}) {
              const size_t worst = mode != trncclEpModeLowLatency ? 0
                                   : lay == trncclEpLayoutFlat
                                       ? size_t(nranks) * 64
                                       : size_t(nranks) * 64 * std::min(K, L);
              for (size_t T : {size_t{0}, size_t{1}, size_t{37}})
                runFp8Step(f, group, rank, nranks, Shape{T, K, E, H, salt % 2 == 1}, type, lay,
                           salt++, worst);
            }
            trncclEpGroupDestroy(group);
          }
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Moe,
                         ::testing::Combine(::testing::Values(std::string("shm")),
                                            ::testing::Values(1, 2, 3, 4, 5, 8)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });
INSTANTIATE_TEST_SUITE_P(Rings, Moe,
                         ::testing::Combine(::testing::Values(std::string("rings")),
                                            ::testing::Values(2, 3, 5)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });
INSTANTIATE_TEST_SUITE_P(Nodes, Moe,
                         ::testing::Values(std::make_tuple(std::string("nodes"), 4),
                                           std::make_tuple(std::string("nodes3"), 5)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Bad input fails on every rank alike, before any token moves, with a message that names
// the rank, the counts and the knob.
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

TEST(MoeErrors, BadInputFailsOnEveryRankWithAClearMessage) {
  auto outcomes = withComm(
      3, [&](int rank) { setupLayout("shm", rank); },
      [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
        const int E = 6, K = 2;
        trncclEpGroup_t group = makeGroup(f, comm, nranks, E, 4, trncclFloat32, 8);
        if (!group) return;
        trncclEpRouting_t routing = nullptr;
        // An expert id out of range on rank 1: rank 1 names the entry, the others rank 1.
        std::vector<int32_t> idx = {0, 1, 2, 3};
        if (rank == 1) idx[3] = E;
        trncclResult_t rc = trncclEpCreateRouting(group, idx.data(), trncclInt32, 2, K,
                                                  trncclEpLayoutFlat, &routing);
        expectError(f, "bad id", rc, trncclInvalidArgument, lastErrorOf(comm),
                    rank == 1 ? std::vector<std::string>{"topk_idx[1][1] = 6", "rank 1"}
                              : std::vector<std::string>{"rank 1 passed bad arguments"});
        // The same expert twice in a row on rank 2.
        idx = {0, 1, 2, 3};
        if (rank == 2) idx = {4, 4, 2, 3};
        rc = trncclEpCreateRouting(group, idx.data(), trncclInt32, 2, K, trncclEpLayoutFlat,
                                   &routing);
        expectError(f, "duplicate id", rc, trncclInvalidArgument, lastErrorOf(comm),
                    rank == 2 ? std::vector<std::string>{"names expert 4 twice"}
                              : std::vector<std::string>{"rank 2 passed bad arguments"});
        // More tokens than maxDispatchTokensPerRank (4), and topk 0.
        std::vector<int64_t> many(5 * K);
        for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int64_t>(i % K);
        rc = trncclEpCreateRouting(group, many.data(), trncclInt64, rank == 0 ? 5 : 1, K,
                                   trncclEpLayoutFlat, &routing);
        expectError(f, "too many tokens", rc, trncclInvalidArgument, lastErrorOf(comm),
                    rank == 0 ? std::vector<std::string>{"max_dispatch_tokens_per_rank"}
                              : std::vector<std::string>{"rank 0"});
        rc = trncclEpCreateRouting(group, idx.data(), trncclInt32, 2, 0, trncclEpLayoutFlat,
                                   &routing);
        expectError(f, "topk 0", rc, trncclInvalidArgument, lastErrorOf(comm), {"topk=0"});
        // Overflow: every token of every rank to both of rank 0's experts, in a group whose
        // capacity (12) fits the flat layout's 12 rows but not expert-major's 24 slots.
        trncclEpConfig_t tight = TRNCCL_EP_CONFIG_INITIALIZER;
        tight.numExperts = E;
        tight.maxDispatchTokensPerRank = 4;
        tight.maxRecvTokensPerRank = 12;
        tight.maxTokenBytes = 32;
        tight.payloadType = trncclFloat32;
        tight.mode = trncclEpModeNormal;
        trncclEpGroup_t small = nullptr;
        if (trncclEpGroupCreate(comm, &tight, &small) != trncclSuccess)
          f.add("tight group: %s", lastErrorOf(comm).c_str());
        std::vector<int32_t> toRank0 = {0, 1, 0, 1, 0, 1, 0, 1};
        rc = trncclEpCreateRouting(small, toRank0.data(), trncclInt32, 4, K, trncclEpLayoutFlat,
                                   &routing);
        if (rc != trncclSuccess)
          f.add("12 rows fit 12: %s", lastErrorOf(comm).c_str());
        else
          trncclEpRoutingDestroy(routing);
        rc = trncclEpCreateRouting(small, toRank0.data(), trncclInt32, 4, K,
                                   trncclEpLayoutExpertMajor, &routing);
        expectError(f, "overflow", rc, trncclInvalidUsage, lastErrorOf(comm),
                    {"rank 0 would receive 24 slots", "maxRecvTokensPerRank",
                     "max_recv_tokens_per_rank", "is 12"});
        trncclEpGroupDestroy(small);
        // A routing that works (every rank receives); then a too-small output, a wrong hidden,
        // a weighted flat combine.
        idx = {0, 2, 4, 1};
        rc = trncclEpCreateRouting(group, idx.data(), trncclInt32, 2, K, trncclEpLayoutFlat,
                                   &routing);
        if (rc != trncclSuccess) {
          f.add("valid routing failed: %s", lastErrorOf(comm).c_str());
          return;
        }
        size_t numRecv = 0;
        (void)trncclEpRoutingGetCounts(routing, &numRecv, nullptr, 0);
        std::vector<float> tokens(2 * 8, 1.0f), out(16 * 8), weights(16 * K);
        rc = trncclEpDispatch(routing, tokens.data(), 8, nullptr, out.data(), weights.data(),
                              nullptr, numRecv - 1);
        expectError(f, "small output", rc, trncclInvalidArgument, lastErrorOf(comm),
                    {"outCapacity is " + std::to_string(numRecv - 1)});
        rc = trncclEpDispatch(routing, tokens.data(), 9, nullptr, out.data(), weights.data(),
                              nullptr, 16);
        expectError(f, "hidden", rc, trncclInvalidArgument, lastErrorOf(comm),
                    {"hidden=9", "maxTokenBytes"});
        rc = trncclEpCombine(routing, out.data(), 8, tokens.data(), 1);
        expectError(f, "weighted flat", rc, trncclInvalidArgument, lastErrorOf(comm),
                    {"expert-major"});
        // After all that, the group still works.
        if (trncclEpDispatch(routing, tokens.data(), 8, nullptr, out.data(), weights.data(),
                             nullptr, 16) != trncclSuccess ||
            trncclEpCombine(routing, out.data(), 8, tokens.data(), 0) != trncclSuccess)
          f.add("valid calls after errors failed: %s", lastErrorOf(comm).c_str());
        trncclEpRoutingDestroy(routing);
        trncclEpGroupDestroy(group);
        // Low latency: the capacity must hold every rank's tokens; a combine needs a dispatch
        // first (that is when the counts arrive). An unknown mode is refused.
        trncclEpConfig_t ll = tight;
        ll.mode = trncclEpModeLowLatency;
        ll.maxRecvTokensPerRank = 11;
        rc = trncclEpGroupCreate(comm, &ll, &group);
        expectError(f, "low-latency capacity", rc, trncclInvalidArgument, lastErrorOf(comm),
                    {"nranks x maxDispatchTokensPerRank = 12", "maxRecvTokensPerRank is 11"});
        ll.maxRecvTokensPerRank = 12;
        if (trncclEpGroupCreate(comm, &ll, &group) != trncclSuccess) {
          f.add("low-latency group: %s", lastErrorOf(comm).c_str());
          return;
        }
        rc = trncclEpCreateRouting(group, toRank0.data(), trncclInt32, 4, K,
                                   trncclEpLayoutExpertMajor, &routing);
        expectError(f, "low-latency expert-major worst case", rc, trncclInvalidArgument,
                    lastErrorOf(comm), {"= 24 slots", "use the flat layout"});
        if (trncclEpCreateRouting(group, toRank0.data(), trncclInt32, 4, K, trncclEpLayoutFlat,
                                  &routing) != trncclSuccess) {
          f.add("low-latency routing: %s", lastErrorOf(comm).c_str());
          return;
        }
        rc = trncclEpCombine(routing, out.data(), 8, tokens.data(), 0);
        expectError(f, "low-latency combine first", rc, trncclInvalidUsage, lastErrorOf(comm),
                    {"dispatch first"});
        trncclEpRoutingDestroy(routing);
        trncclEpGroupDestroy(group);
        ll.mode = static_cast<trncclEpMode_t>(7);
        rc = trncclEpGroupCreate(comm, &ll, &group);
        expectError(f, "unknown mode", rc, trncclInvalidArgument, lastErrorOf(comm),
                    {"mode 7 is not a trncclEpMode_t"});
        // fp8 payloads need their scales, and scales need an fp8 payload.
        trncclEpConfig_t fp8 = tight;
        fp8.payloadType = trncclFloat8e4m3;
        fp8.maxRecvTokensPerRank = 24;
        fp8.mode = trncclEpModeNormal;
        const std::vector<int32_t> toEveryRank = {0, 2, 4, 1, 3, 5, 0, 4};
        if (trncclEpGroupCreate(comm, &fp8, &group) != trncclSuccess ||
            trncclEpCreateRouting(group, toEveryRank.data(), trncclInt32, 4, K, trncclEpLayoutFlat,
                                  &routing) != trncclSuccess) {
          f.add("fp8 group: %s", lastErrorOf(comm).c_str());
          return;
        }
        std::vector<uint8_t> bytes(4 * 8), outBytes(24 * 8);
        std::vector<float> scales(4, 1.0f), outScales(24);
        rc = trncclEpDispatch(routing, bytes.data(), 8, nullptr, outBytes.data(), weights.data(),
                              nullptr, 24);
        expectError(f, "fp8 unscaled", rc, trncclInvalidArgument, lastErrorOf(comm),
                    {"f8e4m3", "trncclEpDispatchScaled"});
        rc = trncclEpDispatchScaled(routing, bytes.data(), nullptr, 8, nullptr, outBytes.data(),
                                    outScales.data(), nullptr, nullptr, 24);
        expectError(f, "fp8 no scales", rc, trncclInvalidArgument, lastErrorOf(comm),
                    {"tokenScales is NULL with 4 tokens"});
        rc = trncclEpDispatchScaled(routing, bytes.data(), scales.data(), 8, nullptr,
                                    outBytes.data(), nullptr, nullptr, nullptr, 24);
        expectError(f, "fp8 no out scales", rc, trncclInvalidArgument, lastErrorOf(comm),
                    {"outScales is NULL"});
        trncclEpRoutingDestroy(routing);
        trncclEpGroupDestroy(group);
        if (trncclEpGroupCreate(comm, &tight, &group) != trncclSuccess ||
            trncclEpCreateRouting(group, toRank0.data(), trncclInt32, 4, K, trncclEpLayoutFlat,
                                  &routing) != trncclSuccess) {
          f.add("fp32 group: %s", lastErrorOf(comm).c_str());
          return;
        }
        rc = trncclEpDispatchScaled(routing, tokens.data(), scales.data(), 8, nullptr, out.data(),
                                    outScales.data(), nullptr, nullptr, 16);
        expectError(f, "scales on fp32", rc, trncclInvalidArgument, lastErrorOf(comm),
                    {"fp8 payloads", "trncclEpDispatch"});
        trncclEpRoutingDestroy(routing);
        trncclEpGroupDestroy(group);
        // Different configurations on different ranks.
        trncclEpConfig_t mine = TRNCCL_EP_CONFIG_INITIALIZER;
        mine.numExperts = rank == 2 ? 9 : 6;
        mine.maxDispatchTokensPerRank = 4;
        mine.maxRecvTokensPerRank = 12;
        mine.maxTokenBytes = 32;
        mine.payloadType = trncclFloat32;
        rc = trncclEpGroupCreate(comm, &mine, &group);
        expectError(f, "config mismatch", rc, trncclInvalidUsage, lastErrorOf(comm),
                    {"configuration", "every rank must pass the same"});
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// A tuning file's moe entries (trnccl-tune --moe) choose the mode of groups in auto mode: the
// entry nearest the group's batch size, over auto's own rule, unless the capacity cannot hold
// the low-latency mode's worst case. A low-latency routing has no counts before its first
// dispatch, which tells the modes apart; each group still delivers the reference result.
TEST(MoeTuning, AutoModeFollowsTheTuningFile) {
  char dir[] = "/tmp/trnccl-moe-tuning-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/moe.tuning";
  {
    FILE* file = std::fopen(path.c_str(), "w");
    ASSERT_NE(file, nullptr);
    std::fputs(
        "trnccl-tuning 1\n"
        "moe ranks=2 nodes=1 tokens=16 mode=normal\n"
        "moe ranks=2 nodes=1 tokens=1024 mode=low_latency\n",
        file);
    std::fclose(file);
  }
  auto outcomes = withComm(
      2,
      [&](int rank) {
        setupLayout("shm", rank);
        setenv("TRNCCL_TUNING_FILE", path.c_str(), 1);
      },
      [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
        const struct {
          int maxTokens, recvPerRank;
          bool lowLatency;
          const char* why;
        } cases[] = {
            {20, 2 * 20 * 8, false, "auto's rule says low latency at 20 tokens; the file normal"},
            {900, 2 * 900 * 8, true, "auto's rule says normal at 900 tokens; the file low latency"},
            {900, 900, false, "the file says low latency but the capacity cannot hold it"},
        };
        for (const auto& c : cases) {
          const Shape s{16, 2, 4, 24, false};
          trncclEpConfig_t config = TRNCCL_EP_CONFIG_INITIALIZER;
          config.numExperts = s.E;
          config.maxDispatchTokensPerRank = c.maxTokens;
          config.maxRecvTokensPerRank = c.recvPerRank;
          config.maxTokenBytes = s.H * 4;
          config.payloadType = trncclFloat32;
          trncclEpGroup_t group = nullptr;
          if (trncclEpGroupCreate(comm, &config, &group) != trncclSuccess) {
            f.add("%s: group: %s", c.why, trncclGetLastError(comm));
            continue;
          }
          auto idx = routingOf(rank, s, 3);
          trncclEpRouting_t routing = nullptr;
          if (trncclEpCreateRouting(group, idx.data(), trncclInt64, s.T, s.K, trncclEpLayoutFlat,
                                    &routing) == trncclSuccess) {
            size_t numRecv = 0;
            const bool countsKnown =
                trncclEpRoutingGetCounts(routing, &numRecv, nullptr, 0) == trncclSuccess;
            if (countsKnown == c.lowLatency)
              f.add("%s: the group is %s", c.why, countsKnown ? "normal" : "low latency");
            trncclEpRoutingDestroy(routing);
          } else {
            f.add("%s: routing: %s", c.why, trncclGetLastError(comm));
          }
          runStep(f, group, rank, nranks, s, trncclFloat32, trncclEpLayoutFlat, false, 7,
                  c.lowLatency ? size_t(nranks) * c.maxTokens : 0);
          trncclEpGroupDestroy(group);
        }
      });
  std::remove(path.c_str());
  rmdir(dir);
  EXPECT_ALL_RANKS_OK(outcomes);
}

// The hierarchical mode's path, proved by the traffic counters: across nodes a rank talks only
// to its proxy (the rank at its own position in the other node), and a token crosses once per
// node however many of its experts live there; the normal mode talks to every remote rank.
TEST(MoeHierarchical, CrossesToOneProxyPerNode) {
  auto outcomes = withComm(
      4, [&](int rank) { setupLayout("nodes", rank); },
      [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
        const Shape s{64, 4, 8, 256, false};  // 2 experts per rank: tokens often hit 2 ranks
        for (trncclEpMode_t mode : {trncclEpModeNormal, trncclEpModeHierarchical}) {
          trncclEpGroup_t group = makeGroup(f, comm, nranks, s.E, 64, trncclFloat32, s.H, mode);
          if (!group) return;
          auto idx = routingOf(rank, s, 11);
          trncclEpRouting_t routing = nullptr;
          if (trncclEpCreateRouting(group, idx.data(), trncclInt64, s.T, s.K, trncclEpLayoutFlat,
                                    &routing) != trncclSuccess) {
            f.add("create routing: %s", trncclGetLastError(nullptr));
            return;
          }
          std::vector<trncclPeerTraffic_t> before(nranks), after(nranks);
          int count = 0;
          (void)trncclCommGetPeerTraffic(comm, before.data(), nranks, &count);
          std::vector<float> tokens(s.T * s.H, 1.0f), out(s.T * s.H);
          std::vector<float> rows(64 * nranks * s.H), weights(64 * nranks * s.K);
          if (trncclEpDispatch(routing, tokens.data(), s.H, nullptr, rows.data(), weights.data(),
                               nullptr, 64 * nranks) != trncclSuccess ||
              trncclEpCombine(routing, rows.data(), s.H, out.data(), 0) != trncclSuccess)
            f.add("dispatch/combine: %s", trncclGetLastError(nullptr));
          (void)trncclCommGetPeerTraffic(comm, after.data(), nranks, &count);
          // Nodes alternate (node-a: 0, 2; node-b: 1, 3); position in the node = rank / 2.
          const int proxy = rank % 2 == 0 ? rank + 1 : rank - 1;
          uint64_t bytesToOtherNode = 0;
          for (int q = 0; q < nranks; ++q) {
            if (q % 2 == rank % 2) continue;
            const uint64_t sent = after[q].sentMessages - before[q].sentMessages;
            bytesToOtherNode += after[q].sentBytes - before[q].sentBytes;
            if (mode == trncclEpModeHierarchical && q != proxy && sent != 0)
              f.add("hierarchical: rank %d sent %llu messages to rank %d, not its proxy %d", rank,
                    static_cast<unsigned long long>(sent), q, proxy);
            if (mode == trncclEpModeNormal && sent == 0)
              f.add("normal: rank %d sent nothing to remote rank %d (test cannot tell modes)", rank,
                    q);
          }
          if (bytesToOtherNode == 0) f.add("mode %d: nothing crossed nodes", mode);
          trncclEpRoutingDestroy(routing);
          trncclEpGroupDestroy(group);
        }
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// One node: with TRNCCL_MOE_DIRECT on (the default) dispatch and combine read the rows out of
// the peers' mapped staging, counted as bytes received from the rank that staged them and
// nothing sent; off, they are messages over the shm transport. Each rank's tokens all go to
// the next rank's expert, so the counts are known exactly.
TEST(MoeDirect, RowsAreReadFromThePeersStagingAndCounted) {
  for (const char* direct : {"1", "0"}) {
    auto outcomes = withComm(
        3, [&](int) { setenv("TRNCCL_MOE_DIRECT", direct, 1); },
        [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
          const size_t T = 40, H = 24;
          const int K = 1;
          trncclEpGroup_t group = makeGroup(f, comm, nranks, nranks, T, trncclFloat32, H);
          if (!group) return;
          const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
          std::vector<int32_t> idx(T, next);
          trncclEpRouting_t routing = nullptr;
          if (trncclEpCreateRouting(group, idx.data(), trncclInt32, T, K, trncclEpLayoutExpertMajor,
                                    &routing) != trncclSuccess) {
            f.add("create routing: %s", trncclGetLastError(comm));
            return;
          }
          std::vector<trncclPeerTraffic_t> before(nranks), after(nranks);
          int count = 0;
          (void)trncclCommGetPeerTraffic(comm, before.data(), nranks, &count);
          std::vector<float> tokens(T * H), out(T * H), rows(T * H), weights(T);
          for (size_t i = 0; i < tokens.size(); ++i)
            tokens[i] = static_cast<float>(rank * 1000 + i);
          if (trncclEpDispatch(routing, tokens.data(), H, nullptr, rows.data(), weights.data(),
                               nullptr, T) != trncclSuccess ||
              trncclEpCombine(routing, rows.data(), H, out.data(), 0) != trncclSuccess) {
            f.add("dispatch/combine: %s", trncclGetLastError(comm));
            return;
          }
          (void)trncclCommGetPeerTraffic(comm, after.data(), nranks, &count);
          for (size_t i = 0; i < rows.size(); ++i)
            if (rows[i] != static_cast<float>(prev * 1000 + i) || out[i] != tokens[i]) {
              f.add("element %zu: row %g (want %d), combined %g (want %g)", i, rows[i],
                    prev * 1000 + static_cast<int>(i), out[i], tokens[i]);
              break;
            }
          auto delta = [&](int q, auto field) { return after[q].*field - before[q].*field; };
          uint64_t sent = 0;
          for (int q = 0; q < nranks; ++q) sent += delta(q, &trncclPeerTraffic_t::sentBytes);
          const uint64_t fromPrev = delta(prev, &trncclPeerTraffic_t::recvBytes);
          const uint64_t fromNext = delta(next, &trncclPeerTraffic_t::recvBytes);
          if (std::string(direct) == "1") {
            // Dispatch: prev's T rows and their weights; combine: next's T rows back.
            const uint64_t rowBytes = H * sizeof(float);
            if (sent != 0 || fromPrev != T * (rowBytes + (K * sizeof(float))) ||
                fromNext != T * rowBytes)
              f.add(
                  "direct: sent %llu bytes (want 0), read %llu from rank %d (want %llu) and "
                  "%llu from rank %d (want %llu)",
                  static_cast<unsigned long long>(sent), static_cast<unsigned long long>(fromPrev),
                  prev, static_cast<unsigned long long>(T * (rowBytes + K * sizeof(float))),
                  static_cast<unsigned long long>(fromNext), next,
                  static_cast<unsigned long long>(T * rowBytes));
          } else if (delta(next, &trncclPeerTraffic_t::sentBytes) < T * H * sizeof(float)) {
            f.add("rings: sent %llu bytes to rank %d, want at least its rows",
                  static_cast<unsigned long long>(delta(next, &trncclPeerTraffic_t::sentBytes)),
                  next);
          }
          trncclEpRoutingDestroy(routing);
          trncclEpGroupDestroy(group);
        });
    EXPECT_ALL_RANKS_OK(outcomes) << "TRNCCL_MOE_DIRECT=" << direct;
  }
}

// Combine gives the same bits on every path: over the rings, from peers' staging (direct), and
// with expert outputs in trncclMemAlloc memory, which peers read where they lie (expert-major:
// the origin sums the slots itself), weighted or not, flat or expert-major.
TEST(MoeDirect, EveryPathCombinesToTheSameBits) {
  auto outcomes = withComm(
      3, [&](int) {},
      [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
        const Shape s{120, 4, nranks * 3, 96, false};
        for (trncclEpLayout_t layout : {trncclEpLayoutExpertMajor, trncclEpLayoutFlat}) {
          const bool flat = layout == trncclEpLayoutFlat;
          std::vector<std::vector<char>> results;
          std::vector<std::string> names;
          for (const char* direct : {"0", "1"}) {
            setenv("TRNCCL_MOE_DIRECT", direct, 1);
            trncclEpGroup_t group = makeGroup(f, comm, nranks, s.E, s.T, trncclBfloat16, s.H);
            if (!group) return;
            auto idx = routingOf(rank, s, 21);
            trncclEpRouting_t routing = nullptr;
            if (trncclEpCreateRouting(group, idx.data(), trncclInt64, s.T, s.K, layout, &routing) !=
                trncclSuccess) {
              f.add("create routing: %s", trncclGetLastError(comm));
              return;
            }
            size_t received = 0;
            (void)trncclEpRoutingGetCounts(routing, &received, nullptr, 0);
            const size_t rowBytes = s.H * 2;
            std::vector<char> tokens(s.T * rowBytes), rows(received * rowBytes + 1);
            std::vector<float> weights(s.T * s.K), outWeights(received * s.K + 1);
            std::mt19937 rng(rank + 7);
            std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
            for (size_t i = 0; i < s.T * s.H; ++i)
              storeValue(trncclBfloat16, tokens.data(), i, uniform(rng));
            for (float& w : weights) w = uniform(rng);
            if (trncclEpDispatch(routing, tokens.data(), s.H, weights.data(), rows.data(),
                                 outWeights.data(), nullptr, received) != trncclSuccess) {
              f.add("dispatch: %s", trncclGetLastError(comm));
              return;
            }
            void* shared = nullptr;
            if (trncclMemAlloc(&shared, rows.size()) != trncclSuccess) {
              f.add("trncclMemAlloc: %s", trncclGetLastError(nullptr));
              return;
            }
            std::memcpy(shared, rows.data(), rows.size());
            for (const bool weighted : {false, true}) {
              if (weighted && flat) continue;  // weighted combine is expert-major only
              for (const bool inShared : {false, true}) {
                std::vector<char> out(s.T * rowBytes);
                const void* experts = inShared ? shared : rows.data();
                if (trncclEpCombine(routing, experts, s.H, out.data(), weighted ? 1 : 0) !=
                    trncclSuccess) {
                  f.add("combine: %s", trncclGetLastError(comm));
                  continue;
                }
                const std::string name = std::string("direct=") + direct +
                                         (weighted ? " weighted" : "") +
                                         (inShared ? " trncclMemAlloc" : "");
                const size_t key = weighted ? 1 : 0;
                if (results.size() <= key) results.resize(key + 1), names.resize(key + 1);
                if (results[key].empty()) {
                  results[key] = out;
                  names[key] = name;
                } else if (out != results[key]) {
                  f.add("%s layout: %s differs bitwise from %s", flat ? "flat" : "expert-major",
                        name.c_str(), names[key].c_str());
                }
              }
            }
            (void)trncclMemFree(shared);
            trncclEpRoutingDestroy(routing);
            trncclEpGroupDestroy(group);
          }
        }
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// Tokens in trncclMemAlloc memory are read by peers where they lie (only each row's token
// index and weights are staged): what arrives is bitwise what arrives from ordinary memory,
// in both layouts, with weights and ids, and after it a combine gives the same bits too.
TEST(MoeDirect, TokensInMemAllocGiveTheSameRows) {
  auto outcomes = withComm(
      3, [&](int) { setenv("TRNCCL_MOE_DIRECT", "1", 1); },
      [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
        const Shape s{90, 3, nranks * 2, 40, true};
        const size_t rowBytes = s.H * 2;
        trncclEpGroup_t group = makeGroup(f, comm, nranks, s.E, s.T, trncclBfloat16, s.H);
        if (!group) return;
        std::vector<char> tokens(s.T * rowBytes);
        std::vector<float> weights(s.T * s.K);
        std::mt19937 rng(rank + 3);
        std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
        for (size_t i = 0; i < s.T * s.H; ++i)
          storeValue(trncclBfloat16, tokens.data(), i, uniform(rng));
        for (float& w : weights) w = uniform(rng);
        void* shared = nullptr;
        if (trncclMemAlloc(&shared, tokens.size()) != trncclSuccess) {
          f.add("trncclMemAlloc: %s", trncclGetLastError(nullptr));
          return;
        }
        std::memcpy(shared, tokens.data(), tokens.size());
        for (trncclEpLayout_t layout : {trncclEpLayoutExpertMajor, trncclEpLayoutFlat}) {
          const bool flat = layout == trncclEpLayoutFlat;
          auto idx = routingOf(rank, s, 33);
          trncclEpRouting_t routing = nullptr;
          if (trncclEpCreateRouting(group, idx.data(), trncclInt64, s.T, s.K, layout, &routing) !=
              trncclSuccess) {
            f.add("create routing: %s", trncclGetLastError(comm));
            break;
          }
          size_t received = 0;
          (void)trncclEpRoutingGetCounts(routing, &received, nullptr, 0);
          std::vector<char> rows[2], out[2];
          std::vector<float> outWeights[2];
          std::vector<int64_t> ids[2];
          for (int inShared = 0; inShared < 2; ++inShared) {
            rows[inShared].assign(received * rowBytes + 1, 0);
            outWeights[inShared].assign(received * s.K + 1, 0.0f);
            ids[inShared].assign(flat ? received * s.K + 1 : 0, 0);
            out[inShared].assign(s.T * rowBytes, 0);
            const void* from = inShared ? shared : tokens.data();
            if (trncclEpDispatch(routing, from, s.H, weights.data(), rows[inShared].data(),
                                 outWeights[inShared].data(), flat ? ids[inShared].data() : nullptr,
                                 received) != trncclSuccess ||
                trncclEpCombine(routing, rows[inShared].data(), s.H, out[inShared].data(),
                                flat ? 0 : 1) != trncclSuccess) {
              f.add("%s: %s", inShared ? "trncclMemAlloc tokens" : "tokens",
                    trncclGetLastError(comm));
              break;
            }
          }
          const char* name = flat ? "flat" : "expert-major";
          if (rows[0] != rows[1])
            f.add("%s: received rows differ with trncclMemAlloc tokens", name);
          if (outWeights[0] != outWeights[1]) f.add("%s: weights differ", name);
          if (ids[0] != ids[1]) f.add("%s: local ids differ", name);
          if (out[0] != out[1]) f.add("%s: combined tokens differ", name);
          trncclEpRoutingDestroy(routing);
        }
        (void)trncclMemFree(shared);
        trncclEpGroupDestroy(group);
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// Expert outputs in trncclMemAlloc memory are read by peers during their combine, so the
// buffer cannot be freed while a combine that uses it is queued.
TEST(MoeDirect, ExpertOutputsCannotBeFreedWhileACombineUsesThem) {
  auto outcomes = withComm(
      3, [&](int) {},
      [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
        const Shape s{16, 2, nranks * 2, 32, false};
        trncclEpGroup_t group = makeGroup(f, comm, nranks, s.E, s.T, trncclFloat32, s.H);
        if (!group) return;
        auto idx = routingOf(rank, s, 3);
        trncclEpRouting_t routing = nullptr;
        if (trncclEpCreateRouting(group, idx.data(), trncclInt64, s.T, s.K,
                                  trncclEpLayoutExpertMajor, &routing) != trncclSuccess) {
          f.add("create routing: %s", trncclGetLastError(comm));
          return;
        }
        size_t received = 0;
        (void)trncclEpRoutingGetCounts(routing, &received, nullptr, 0);
        void* experts = nullptr;
        if (trncclMemAlloc(&experts, (received + 1) * s.H * sizeof(float)) != trncclSuccess) {
          f.add("trncclMemAlloc: %s", trncclGetLastError(nullptr));
          return;
        }
        std::vector<float> tokens(s.T * s.H, 1.0f), out(s.T * s.H), weights(received + 1);
        if (trncclEpDispatch(routing, tokens.data(), s.H, nullptr, experts, weights.data(), nullptr,
                             received) != trncclSuccess)
          f.add("dispatch: %s", trncclGetLastError(comm));
        // Rank 0 joins late, so every other rank's combine is still queued when it frees.
        if (rank == 0) usleep(200 * 1000);
        trncclRequest_t request = nullptr;
        if (trncclEpCombineAsync(routing, experts, s.H, out.data(), 1, &request) != trncclSuccess) {
          f.add("combine: %s", trncclGetLastError(comm));
          return;
        }
        if (rank != 0) {
          const trncclResult_t rc = trncclMemFree(experts);
          const std::string text = trncclGetLastError(nullptr);
          if (rc != trncclInvalidUsage || text.find("still use") == std::string::npos)
            f.add("freeing during the combine: result %d (want %d), '%s'", rc, trncclInvalidUsage,
                  text.c_str());
        }
        if (trncclWait(&request, TRNCCL_TIMEOUT_DEFAULT) != trncclSuccess)
          f.add("wait: %s", trncclGetLastError(comm));
        if (trncclMemFree(experts) != trncclSuccess)
          f.add("free after the combine: %s", trncclGetLastError(nullptr));
        trncclEpRoutingDestroy(routing);
        trncclEpGroupDestroy(group);
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

}  // namespace
