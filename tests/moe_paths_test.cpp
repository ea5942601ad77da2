// Which path the TokenSwitch engine's bytes take, proved by the traffic counters and by
// comparing results across paths: the hierarchical mode's one proxy per node, the direct mode's
// reads of peers' staging, and trncclMemAlloc tokens and expert outputs read in place.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/moe_reference.hpp"
#include "support/sweep.hpp"

using namespace trnccl::testing;

namespace {

// The hierarchical mode's path, proved by the traffic counters: across nodes a rank talks only
// to its proxy (the rank at its own position in the other node), and a token crosses once per
// node however many of its experts live there; the normal mode talks to every remote rank, and
// auto takes the hierarchical mode across nodes for batches past the low-latency limit.
// Inside a node, with TRNCCL_MOE_DIRECT on (the default), the hierarchical mode sends its node
// peer no message: the peer reads the rows out of this rank's mapped staging (counted as
// received from it); off, the rows go over the shm transport.
TEST(MoeHierarchical, CrossesToOneProxyPerNode) {
  for (const char* direct : {"1", "0"}) {
    auto outcomes = withComm(
        4,
        [&](int rank) {
          setupLayout("nodes", rank);
          setenv("TRNCCL_MOE_DIRECT", direct, 1);
        },
        [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
          const Shape s{64, 4, 8, 256, false};  // 2 experts per rank: tokens often hit 2 ranks
          // Auto across nodes, past the low-latency limit (128 tokens), is hierarchical.
          for (trncclEpMode_t mode :
               {trncclEpModeNormal, trncclEpModeHierarchical, trncclEpModeAuto}) {
            const int maxTokens = mode == trncclEpModeAuto ? 256 : 64;
            trncclEpGroup_t group =
                makeGroup(f, comm, nranks, s.E, maxTokens, trncclFloat32, s.H, mode);
            if (!group) return;
            auto idx = routingOf(rank, s, 11);
            trncclEpRouting_t routing = createRouting(f, group, idx, s, trncclEpLayoutFlat);
            if (!routing) return;
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
            const int nodePeer = (rank + 2) % nranks;
            uint64_t bytesToOtherNode = 0;
            for (int q = 0; q < nranks; ++q) {
              if (q % 2 == rank % 2) continue;
              const uint64_t sent = after[q].sentMessages - before[q].sentMessages;
              bytesToOtherNode += after[q].sentBytes - before[q].sentBytes;
              if (mode != trncclEpModeNormal && q != proxy && sent != 0)
                f.add("hierarchical: rank %d sent %llu messages to rank %d, not its proxy %d", rank,
                      static_cast<unsigned long long>(sent), q, proxy);
              if (mode == trncclEpModeNormal && sent == 0)
                f.add("normal: rank %d sent nothing to remote rank %d (test cannot tell modes)",
                      rank, q);
            }
            if (bytesToOtherNode == 0) f.add("mode %d: nothing crossed nodes", mode);
            if (mode != trncclEpModeNormal) {
              const uint64_t sentInNode =
                  after[nodePeer].sentMessages - before[nodePeer].sentMessages;
              const uint64_t readInNode = after[nodePeer].recvBytes - before[nodePeer].recvBytes;
              if (std::string(direct) == "1" && (sentInNode != 0 || readInNode == 0))
                f.add(
                    "hierarchical, mapped: rank %d sent %llu messages to its node peer %d and "
                    "read %llu bytes of its staging (want none and some)",
                    rank, static_cast<unsigned long long>(sentInNode), nodePeer,
                    static_cast<unsigned long long>(readInNode));
              if (std::string(direct) == "0" && sentInNode == 0)
                f.add("hierarchical over the transports: rank %d sent its node peer %d nothing",
                      rank, nodePeer);
            }
            trncclEpRoutingDestroy(routing);
            trncclEpGroupDestroy(group);
          }
        });
    EXPECT_ALL_RANKS_OK(outcomes) << "TRNCCL_MOE_DIRECT=" << direct;
  }
}

// One node: with TRNCCL_MOE_DIRECT on (the default) dispatch and combine read the rows out of
// the peers' mapped staging, counted as bytes received from the rank that staged them and
// nothing sent; off, they are messages over the shm transport. Both modes: the low-latency one
// learns the counts from the peers' staging (direct) or from a first message (rings). Each
// rank's tokens all go to the next rank's expert, so the counts are known exactly.
TEST(MoeDirect, RowsAreReadFromThePeersStagingAndCounted) {
  for (const char* direct : {"1", "0"})
    for (trncclEpMode_t mode : {trncclEpModeNormal, trncclEpModeLowLatency}) {
      auto outcomes = withComm(
          3, [&](int) { setenv("TRNCCL_MOE_DIRECT", direct, 1); },
          [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
            const size_t T = 40, H = 24;
            const int K = 1;
            trncclEpGroup_t group = makeGroup(f, comm, nranks, nranks, T, trncclFloat32, H, mode);
            if (!group) return;
            const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
            std::vector<int32_t> idx(T, next);
            trncclEpRouting_t routing = nullptr;
            if (trncclEpCreateRouting(group, idx.data(), trncclInt32, T, K,
                                      trncclEpLayoutExpertMajor, &routing) != trncclSuccess) {
              f.add("create routing: %s", trncclGetLastError(comm));
              return;
            }
            std::vector<trncclPeerTraffic_t> before(nranks), after(nranks);
            int count = 0;
            (void)trncclCommGetPeerTraffic(comm, before.data(), nranks, &count);
            // Low latency: outputs hold the worst case (every rank's tokens could land here).
            const size_t capacity = mode == trncclEpModeLowLatency ? T * nranks : T;
            std::vector<float> tokens(T * H), out(T * H), rows(capacity * H), weights(capacity);
            for (size_t i = 0; i < tokens.size(); ++i)
              tokens[i] = static_cast<float>(rank * 1000 + i);
            if (trncclEpDispatch(routing, tokens.data(), H, nullptr, rows.data(), weights.data(),
                                 nullptr, capacity) != trncclSuccess ||
                trncclEpCombine(routing, rows.data(), H, out.data(), 0) != trncclSuccess) {
              f.add("dispatch/combine: %s", trncclGetLastError(comm));
              return;
            }
            (void)trncclCommGetPeerTraffic(comm, after.data(), nranks, &count);
            for (size_t i = 0; i < T * H; ++i)
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
              // Dispatch: prev's T rows and their weights (low latency: and their expert ids);
              // combine: next's T rows back.
              const uint64_t rowBytes = H * sizeof(float);
              const uint64_t perRow =
                  rowBytes + (K * sizeof(float)) + (mode == trncclEpModeLowLatency ? K * 4 : 0);
              if (sent != 0 || fromPrev != T * perRow || fromNext != T * rowBytes)
                f.add(
                    "direct: sent %llu bytes (want 0), read %llu from rank %d (want %llu) and "
                    "%llu from rank %d (want %llu)",
                    static_cast<unsigned long long>(sent),
                    static_cast<unsigned long long>(fromPrev), prev,
                    static_cast<unsigned long long>(T * perRow),
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
      EXPECT_ALL_RANKS_OK(outcomes) << "TRNCCL_MOE_DIRECT=" << direct << ", mode " << mode;
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
            trncclEpRouting_t routing = createRouting(f, group, idx, s, layout);
            if (!routing) return;
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
          trncclEpRouting_t routing = createRouting(f, group, idx, s, layout);
          if (!routing) break;
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
        trncclEpRouting_t routing = createRouting(f, group, idx, s, trncclEpLayoutExpertMajor);
        if (!routing) return;
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
