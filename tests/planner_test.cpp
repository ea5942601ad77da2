// The cost model and its tuning file: parsing (every kind of mistake refused, naming the line
// and the field), the text written by tuningText loading back the same, and the planner's
// table agreeing with the model at every size.
#include <gtest/gtest.h>

#include <cmath>

#include "collectives/cost_model.hpp"
#include "collectives/planner.hpp"
#include "collectives/registry.hpp"

namespace trnccl {
namespace {

TEST(TuningFile, WrittenTextLoadsBackTheSameNumbers) {
  CostParams tuned = machineCosts();
  tuned.of(topology::LinkClass::kEfa) = {12.5, 1.25};
  tuned.stepUs = 0.75;
  tuned.syncUs = 0.125;
  tuned.copyGBps = 7;
  tuned.reduceGBps = 3.5;
  tuned.sliceUs = 42.5;
  tuned.moe.push_back({4, 2, 128, "hierarchical", 4096, 8, 0});
  tuned.moe.push_back({2, 1, 16, "low_latency", 0, 0, 0});
  auto back = parseTuning(tuningText(tuned), "test", CostParams{});
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(tuningText(back.value()), tuningText(tuned));
  EXPECT_EQ(back.value().origin, "test");
}

TEST(TuningFile, FieldsItDoesNotNameKeepTheDefaults) {
  auto partial = parseTuning("trnccl-tuning 1\n  # only efa\nlink efa gbps=9 # trailing\n\n",
                             "partial", machineCosts());
  ASSERT_TRUE(partial.isOk()) << partial.status().message();
  const CostParams defaults = machineCosts();
  EXPECT_EQ(partial.value().of(topology::LinkClass::kEfa).gbps, 9);
  EXPECT_EQ(partial.value().of(topology::LinkClass::kEfa).alphaUs,
            defaults.of(topology::LinkClass::kEfa).alphaUs);
  EXPECT_EQ(partial.value().stepUs, defaults.stepUs);
}

TEST(TuningFile, EveryKindOfMistakeIsRefusedNamingTheLineAndField) {
  const struct {
    const char* text;
    const char* expected;
  } cases[] = {
      {"", "is empty"},
      {"# nothing\n", "is empty"},
      {"trnccl-tuning 2\n", "line 1: expected the header 'trnccl-tuning 1'"},
      {"link efa gbps=3\n", "line 1: expected the header"},
      {"trnccl-tuning 1\nlink\n", "line 2: 'link' needs a class"},
      {"trnccl-tuning 1\nlink nvlink gbps=3\n", "line 2: unknown link class 'nvlink'"},
      {"trnccl-tuning 1\nlink efa speed=3\n", "line 2: unknown field 'speed'"},
      {"trnccl-tuning 1\nlink efa gbps=\n", "line 2: gbps='' is not a positive number"},
      {"trnccl-tuning 1\nlink efa gbps=0\n", "line 2: gbps='0' is not a positive number"},
      {"trnccl-tuning 1\nlink efa gbps=-1\n", "line 2: gbps='-1'"},
      {"trnccl-tuning 1\nlink efa alpha_us=1x\n", "line 2: alpha_us='1x' is not a non-negative"},
      {"trnccl-tuning 1\nlink efa alpha_us=inf\n", "line 2: alpha_us='inf'"},
      {"trnccl-tuning 1\n\nstep_us\n", "line 3: 'step_us' takes one number"},
      {"trnccl-tuning 1\nstep_us 1 2\n", "line 2: 'step_us' takes one number"},
      {"trnccl-tuning 1\ncopy_gbps 0\n", "line 2: copy_gbps='0' is not a positive number"},
      {"trnccl-tuning 1\nreduce_gbps nan\n", "line 2: reduce_gbps='nan'"},
      {"trnccl-tuning 1\nslice_us -5\n", "line 2: slice_us='-5' is not a non-negative number"},
      {"trnccl-tuning 1\nwarp_factor 9\n", "line 2: unknown key 'warp_factor'"},
      {"trnccl-tuning 1\nmoe ranks=2 nodes=1 tokens=8\n",
       "line 2: a moe entry needs ranks=, nodes=, tokens= and mode="},
      {"trnccl-tuning 1\nmoe ranks=2 nodes=1 tokens=8 mode=fast\n",
       "line 2: moe mode='fast' is not normal, low_latency or hierarchical"},
      {"trnccl-tuning 1\nmoe ranks=2 nodes=1 tokens=-8 mode=normal\n",
       "line 2: moe tokens='-8' is not a positive integer"},
      {"trnccl-tuning 1\nmoe ranks=2 nodes=1 tokens=8 mode=normal chunk=4\n",
       "line 2: unknown moe field 'chunk'"},
      {"trnccl-tuning 1\nmoe ranks=2 nodes=1 tokens=8 mode=hierarchical\n",
       "line 2: moe mode=hierarchical needs nodes= of 2 or more"},
      {"trnccl-tuning 1\nmoe ranks=2 nodes=3 tokens=8 mode=normal\n",
       "line 2: moe nodes= is larger than ranks="},
      {"trnccl-tuning 1\nmoe ranks=2 nodes=1 tokens=8 mode=normal\n"
       "moe ranks=2 nodes=1 tokens=8 mode=low_latency\n",
       "line 3: a second moe entry for ranks=2 nodes=1 tokens=8 (line 2 has one)"},
  };
  for (const auto& c : cases) {
    auto parsed = parseTuning(c.text, "TRNCCL_TUNING_FILE=/t", machineCosts());
    ASSERT_FALSE(parsed.isOk()) << c.text;
    EXPECT_NE(parsed.status().message().find("TRNCCL_TUNING_FILE=/t"), std::string::npos);
    EXPECT_NE(parsed.status().message().find(c.expected), std::string::npos)
        << c.text << " -> " << parsed.status().message();
  }
}

TEST(TuningFile, TheMoeEntryNearestTheBatchSizeDecides) {
  auto parsed = parseTuning(
      "trnccl-tuning 1\n"
      "moe ranks=4 nodes=2 tokens=16 mode=low_latency\n"
      "moe ranks=4 nodes=2 tokens=1024 mode=hierarchical\n"
      "moe ranks=4 nodes=1 tokens=64 mode=normal\n",
      "t", machineCosts());
  ASSERT_TRUE(parsed.isOk()) << parsed.status().message();
  const CostParams& c = parsed.value();
  EXPECT_EQ(c.moeEntry(4, 2, 8)->mode, "low_latency");
  EXPECT_EQ(c.moeEntry(4, 2, 100)->mode, "low_latency");   // 100/16 < 1024/100
  EXPECT_EQ(c.moeEntry(4, 2, 200)->mode, "hierarchical");  // 200/16 > 1024/200
  EXPECT_EQ(c.moeEntry(4, 2, 128)->mode, "hierarchical");  // a tie: the larger batch
  EXPECT_EQ(c.moeEntry(4, 2, 1 << 20)->mode, "hierarchical");
  EXPECT_EQ(c.moeEntry(4, 1, 1 << 20)->mode, "normal");
  EXPECT_EQ(c.moeEntry(4, 2, 8)->line, 2);
  EXPECT_EQ(c.moeEntry(8, 2, 8), nullptr);  // measured on another shape of job
}

TEST(CostModel, TimesGrowWithSizeAndShapesThatDoNotFitAreNever) {
  CommView view;
  view.nranks = 8;
  view.allLocal = false;  // no topology: every rank as its own node
  const PlanShape shape = planShapeOf(view);
  EXPECT_EQ(shape.nodes, 8);
  const CostParams costs = machineCosts();
  for (Algorithm algo : {Algorithm::kRing, Algorithm::kRecursiveDoubling, Algorithm::kRhd}) {
    double previous = 0;
    for (size_t bytes = 8; bytes <= (size_t{1} << 30); bytes *= 4) {
      const double us = modeledUs(algo, CollKind::kAllReduce, bytes, shape, costs);
      EXPECT_GT(us, previous) << algorithmName(algo) << " " << bytes;
      previous = us;
    }
  }
  EXPECT_TRUE(std::isinf(modeledUs(Algorithm::kDirect, CollKind::kAllReduce, 8, shape, costs)));
  EXPECT_TRUE(
      std::isinf(modeledUs(Algorithm::kHierarchical, CollKind::kAllReduce, 8, shape, costs)));
  EXPECT_TRUE(std::isinf(modeledUs(Algorithm::kBruck, CollKind::kAllReduce, 8, shape, costs)));
}

// Where a node's efa capacity is shared (loopback here: one kernel on the same cores), a round
// in which every rank of a node sends across nodes takes that many times as long as one in
// which one rank does: Bruck's second all-gather round on 2 nodes x 2 ranks moves each rank's
// half across at once, the ring one quarter per node per step, so the ring is cheaper for
// large buffers; with each rank owning its share (Neuron hardware) Bruck's fewer rounds win.
TEST(CostModel, RanksOfANodeSharingEfaQueueOnIt) {
  PlanShape shape;
  shape.nranks = 4;
  shape.nodes = 2;
  shape.perNode = 2;
  const size_t bytes = size_t{1} << 30;
  CostParams shared = machineCosts();
  ASSERT_TRUE(shared.efaShared);
  const double ring = modeledUs(Algorithm::kRing, CollKind::kAllGather, bytes, shape, shared);
  const double bruck = modeledUs(Algorithm::kBruck, CollKind::kAllGather, bytes, shape, shared);
  // Ring: 3 steps of a quarter, one sender per node; Bruck: a quarter with one sender per node,
  // then a half with two (4 quarters' time), in one step fewer.
  const LinkCost& efa = shared.of(topology::LinkClass::kEfa);
  const double quarterUs = bytes / 4.0 / (efa.gbps * 1e3);
  EXPECT_NEAR(bruck - ring, 2 * quarterUs - (efa.alphaUs + shared.stepUs), 1e-6 * ring);
  CostParams own = shared;
  own.efaShared = false;
  EXPECT_LT(modeledUs(Algorithm::kBruck, CollKind::kAllGather, bytes, shape, own),
            modeledUs(Algorithm::kRing, CollKind::kAllGather, bytes, shape, own));
  // Inside one node nothing changes.
  PlanShape local;
  local.nranks = 4;
  EXPECT_EQ(modeledUs(Algorithm::kBruck, CollKind::kAllGather, bytes, local, shared),
            modeledUs(Algorithm::kBruck, CollKind::kAllGather, bytes, local, own));
}

// A ring step's reduction reads the message where it landed instead of the receive's copy, so
// it adds only what it costs beyond that copy: with reductions as fast as copies, a 2-rank
// reduce-scatter costs its one message and step; with slower reductions, the difference.
TEST(CostModel, AReductionAsTheMessageLandsReplacesTheReceiveCopy) {
  PlanShape shape;
  shape.nranks = 2;
  CostParams c = machineCosts();
  c.of(topology::LinkClass::kShm) = {1.0, 4.0};
  c.stepUs = 0.5;
  c.copyGBps = 8.0;
  c.reduceGBps = 8.0;
  const double bytes = 8e6;  // 4 MB cross: 1000 us at 4 GB/s
  EXPECT_NEAR(modeledUs(Algorithm::kRing, CollKind::kReduceScatter, bytes, shape, c),
              1.0 + 1000 + 0.5, 1e-6);
  c.reduceGBps = 4.0;  // 4 MB: 1000 us reducing against 500 us copying
  EXPECT_NEAR(modeledUs(Algorithm::kRing, CollKind::kReduceScatter, bytes, shape, c),
              1.0 + 1000 + 0.5 + 500, 1e-6);
}

// Direct's small-message lines (collectives/reduce_scatter/direct.cpp) carry a reduce-scatter
// whose whole input fits them: one synchronisation, no window rounds, as for all-reduce.
TEST(CostModel, TinyReduceScattersGoThroughTheLines) {
  PlanShape shape;
  shape.nranks = 2;
  const CostParams c = machineCosts();
  for (CollKind kind : {CollKind::kReduceScatter, CollKind::kAllReduce})
    EXPECT_DOUBLE_EQ(modeledUs(Algorithm::kDirect, kind, shape.llMaxBytes, shape, c),
                     c.syncUs + c.stepUs)
        << collName(kind);
  EXPECT_GT(
      modeledUs(Algorithm::kDirect, CollKind::kReduceScatter, shape.llMaxBytes + 64, shape, c),
      2 * c.syncUs + c.stepUs);
}

// 2 nodes x 2 ranks, as the emulated nodes of the benchmarks lay them out.
PlanShape twoNodesOfTwo() {
  PlanShape shape;
  shape.nranks = 4;
  shape.nodes = 2;
  shape.perNode = 2;
  shape.allLocal = false;
  shape.hierarchicalFits = true;
  return shape;
}

// With more ranks than cores a broadcast's chain cannot overlap its hops (each forwarding rank
// needs a busy core), so on 2 nodes x 2 ranks the ring's chain (shm, efa, shm) costs more than
// the hierarchical broadcast (efa, then shm in both nodes at once), as measured; with a core
// per rank the pipelined ring stays ahead. A reduce's chain keeps the overlap either way.
TEST(CostModel, OversubscribedBroadcastChainsPayEveryHop) {
  PlanShape shape = twoNodesOfTwo();
  const CostParams c = machineCosts();
  const size_t bytes = size_t{64} << 20;
  double reduceByRing[2];
  for (bool oversubscribed : {false, true}) {
    shape.oversubscribed = oversubscribed;
    const double ring = modeledUs(Algorithm::kRing, CollKind::kBroadcast, bytes, shape, c);
    const double hierarchical =
        modeledUs(Algorithm::kHierarchical, CollKind::kBroadcast, bytes, shape, c);
    EXPECT_EQ(ring > hierarchical, oversubscribed)
        << "ring " << ring << " us, hierarchical " << hierarchical << " us";
    reduceByRing[oversubscribed] = modeledUs(Algorithm::kRing, CollKind::kReduce, bytes, shape, c);
  }
  EXPECT_DOUBLE_EQ(reduceByRing[0], reduceByRing[1]);
  // Pieces pay every hop: one more piece costs the sum of the three hops' messages.
  const double piece = static_cast<double>(shape.windowBytes);
  const double one = modeledUs(Algorithm::kRing, CollKind::kBroadcast, shape.windowBytes, shape, c);
  const double two =
      modeledUs(Algorithm::kRing, CollKind::kBroadcast, 2 * shape.windowBytes, shape, c);
  const LinkCost& shm = c.of(topology::LinkClass::kShm);
  const LinkCost& efa = c.of(topology::LinkClass::kEfa);
  EXPECT_NEAR(two - one,
              2 * (shm.alphaUs + piece / (shm.gbps * 1e3)) + efa.alphaUs +
                  piece / (efa.gbps * 1e3) + 3 * c.stepUs,
              1e-6);
}

// Nodes emulated on one oversubscribed machine: every node's efa senders queue on the same
// cores (efaQueue), so the flat ring's all-gather, whose two nodes each send a quarter per step,
// pays both quarters per step; separate machines (not oversubscribed) are unchanged. And the
// grid all-gather stages blocks under 64 KiB (copy(S + S/n)) but sends larger ones where they
// lie, one more message per extra run of ranks in a part.
TEST(CostModel, EmulatedNodesQueueEveryNodesEfaSendersAndLargeGridBlocksAreNotStaged) {
  PlanShape shape = twoNodesOfTwo();
  const CostParams c = machineCosts();
  const LinkCost& efa = c.of(topology::LinkClass::kEfa);
  const LinkCost& shm = c.of(topology::LinkClass::kShm);
  const size_t bytes = size_t{64} << 20;
  const double quarterUs = bytes / 4.0 / (efa.gbps * 1e3);
  const double ringApart = modeledUs(Algorithm::kRing, CollKind::kAllGather, bytes, shape, c);
  const double hierApart =
      modeledUs(Algorithm::kHierarchical, CollKind::kAllGather, bytes, shape, c);
  shape.oversubscribed = true;
  const double ringTogether = modeledUs(Algorithm::kRing, CollKind::kAllGather, bytes, shape, c);
  const double hierTogether =
      modeledUs(Algorithm::kHierarchical, CollKind::kAllGather, bytes, shape, c);
  EXPECT_NEAR(ringTogether - ringApart, 3 * quarterUs, 1e-6 * ringApart);
  // The hierarchical schedule's efa level already queued the node's two senders; now four.
  EXPECT_NEAR(hierTogether - hierApart, 2 * quarterUs, 1e-6 * hierApart);
  EXPECT_LT(ringApart, hierApart);
  EXPECT_GT(ringTogether, hierTogether);
  // 64 MiB in 16 MiB blocks: the levels' messages plus one more shm message (the node ring's
  // part is two runs of ranks), no copy. 64 KiB in 16 KiB blocks: the levels plus copy(S + S/n).
  shape.oversubscribed = false;
  const double halfUs = bytes / 2.0 / (shm.gbps * 1e3);
  EXPECT_NEAR(hierApart,
              (shm.alphaUs + halfUs + c.stepUs) + (efa.alphaUs + 2 * quarterUs + c.stepUs) +
                  (shm.alphaUs + c.stepUs),
              1e-6 * hierApart);
  const double small = 64 << 10;
  EXPECT_NEAR(modeledUs(Algorithm::kHierarchical, CollKind::kAllGather, 64 << 10, shape, c),
              (shm.alphaUs + small / 2 / (shm.gbps * 1e3) + c.stepUs) +
                  (efa.alphaUs + 2 * small / 4 / (efa.gbps * 1e3) + c.stepUs) +
                  (small + small / 4) / (c.copyGBps * 1e3),
              1e-9);
}

// A communicator's view with the shm protocol's default limits.
CommView viewOf(int nranks, bool allLocal) {
  CommView view;
  view.nranks = nranks;
  view.allLocal = allLocal;
  view.windowBytes = 256 << 10;
  view.llMaxBytes = 64;
  view.oneShotMaxBytes = 16 << 10;
  return view;
}

TEST(Planner, ChoiceIsTheCheapestCandidateAtEverySize) {
  for (bool allLocal : {true, false}) {
    const CommView view = viewOf(6, allLocal);
    const Planner planner(view, parseAlgoOverrides("").value());
    for (int k = 0; k < static_cast<int>(CollKind::kSendRecv); ++k) {
      const auto kind = static_cast<CollKind>(k);
      const size_t perCall = kind == CollKind::kAllGather || kind == CollKind::kReduceScatter ||
                                     kind == CollKind::kAllToAll
                                 ? 6
                                 : 1;
      for (size_t bytes = 1; bytes <= (size_t{1} << 32); bytes *= 2) {
        if (kind == CollKind::kAllToAllv) break;  // one choice for every size (below)
        // A call is planned at the upper end of its power-of-two bucket.
        size_t bucketEnd = 1;
        while (bucketEnd < bytes * perCall) bucketEnd *= 2;
        const auto options = planner.ranked(kind, bucketEnd);
        ASSERT_FALSE(options.empty());
        EXPECT_EQ(planner.choose(kind, bytes).value(), options.front().algo)
            << collName(kind) << " " << bytes << " allLocal " << allLocal;
      }
    }
  }
}

// With more ranks than cores the direct broadcast and reduce (every rank waits for all the
// others) lose to a tree at small sizes, which the model says; the same shape with a core per
// rank keeps direct, a 1 MiB broadcast stays direct either way (its copies outweigh the
// synchronisations; a 1 MiB reduce's chain is close enough to direct that they still decide),
// and the symmetric collectives keep direct either way.
TEST(Planner, OversubscribedRootedCollectivesLeaveDirectAtSmallSizes) {
  Algorithm large[2];  // [oversubscribed]: broadcast at 1 MiB
  for (bool oversubscribed : {false, true}) {
    CommView view = viewOf(4, true);
    view.oversubscribed = oversubscribed;
    const Planner planner(view, parseAlgoOverrides("").value());
    for (CollKind kind : {CollKind::kBroadcast, CollKind::kReduce}) {
      const Algorithm small = planner.choose(kind, 1024).value();
      EXPECT_EQ(small == Algorithm::kDirect, !oversubscribed)
          << collName(kind) << " 1 KiB, oversubscribed " << oversubscribed << ": "
          << algorithmName(small);
      if (kind == CollKind::kBroadcast)
        large[oversubscribed] = planner.choose(kind, 1 << 20).value();
    }
    for (CollKind kind : {CollKind::kAllReduce, CollKind::kAllGather, CollKind::kReduceScatter})
      EXPECT_EQ(planner.choose(kind, 1024).value(), Algorithm::kDirect) << collName(kind);
  }
  EXPECT_EQ(large[0], Algorithm::kDirect);
  EXPECT_EQ(large[1], Algorithm::kDirect);
}

}  // namespace
}  // namespace trnccl
