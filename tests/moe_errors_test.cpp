// The TokenSwitch engine refuses bad input on every rank alike, before any token moves, with a
// message that names the rank, the counts and the knob; and a tuning file's moe entries choose
// the mode of groups in auto mode.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "support/moe_reference.hpp"
#include "support/sweep.hpp"

using namespace trnccl::testing;

namespace {

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

}  // namespace
