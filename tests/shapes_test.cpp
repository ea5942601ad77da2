// The shapes topology-shaped algorithms run over, and the planner's choices between them: link
// orders are rings of links, torus levels are the torus's rows and columns, hierarchical
// groups fold uneven nodes into owners, and TRNCCL_ALGO asking for a shape that does not fit
// is refused with the reason. Expected groups are written out from the torus rule here.
#include <gtest/gtest.h>

#include <map>

#include "collectives/cost_model.hpp"
#include "collectives/planner.hpp"
#include "collectives/registry.hpp"
#include "collectives/shapes.hpp"
#include "topology/presets.hpp"

namespace trnccl {
namespace {

topology::Discovery presetDiscovery(const std::string& name) {
  topology::Discovery d;
  d.kind = topology::Discovery::Kind::kPreset;
  d.source = "TRNCCL_TOPO_PRESET=" + name;
  d.graph = topology::preset(name).value();
  return d;
}

// nodes x perNode ranks, node-major, local rank i on chip i (when there is a graph).
topology::Topology job(int nodes, int perNode, const std::string& presetName) {
  std::vector<uint64_t> hosts;
  std::vector<int> chips;
  for (int n = 0; n < nodes; ++n)
    for (int i = 0; i < perNode; ++i) {
      hosts.push_back(100 + n);
      chips.push_back(presetName.empty() ? -1 : i);
    }
  topology::Discovery found;
  if (!presetName.empty()) found = presetDiscovery(presetName);
  auto t = topology::Topology::build(topology::groupByHost(hosts), found, chips);
  EXPECT_TRUE(t.isOk()) << t.status().message();
  return t.value();
}

bool adjacent(int a, int b) {
  int ax = a % 4, ay = a / 4, bx = b % 4, by = b / 4;
  return (ay == by && ((ax + 1) % 4 == bx || (bx + 1) % 4 == ax)) ||
         (ax == bx && ((ay + 1) % 4 == by || (by + 1) % 4 == ay));
}

TEST(Shapes, LinkOrderOfAFullTrn2NodeIsARingOfLinks) {
  auto t = job(1, 16, "trn2.48xlarge");
  std::vector<int> order = t.linkOrder(0);
  ASSERT_EQ(order.size(), 16u);
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(sorted[i], i);
  for (int i = 0; i < 16; ++i)
    EXPECT_TRUE(adjacent(order[i], order[(i + 1) % 16])) << order[i] << "-" << order[(i + 1) % 16];
}

TEST(Shapes, WithoutDevicesTheOrderIsRankOrder) {
  auto t = job(2, 3, "");
  EXPECT_EQ(t.ringOrder(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST(Shapes, TorusLevelsAreRowsAndColumnsThenNodes) {
  auto t = job(2, 16, "trn2u.48xlarge");
  Shapes s = buildShapes(t, 16 + 6);  // node 1, chip 6 = (2, 1)
  ASSERT_TRUE(s.torus.fits) << s.torus.whyNot;
  ASSERT_EQ(s.torus.levels.size(), 3u);
  EXPECT_EQ(s.torus.levels[0].ranks, (std::vector<int>{20, 21, 22, 23}));  // row y = 1
  EXPECT_EQ(s.torus.levels[1].ranks, (std::vector<int>{18, 22, 26, 30}));  // column x = 2
  EXPECT_EQ(s.torus.levels[2].ranks, (std::vector<int>{6, 22}));           // across nodes
  EXPECT_EQ(s.torus.levels[0].pos, 2);
  EXPECT_EQ(s.torus.describe, "4x4x2");
  EXPECT_EQ(s.torus.gridRanks.size(), 32u);
  auto partial = job(1, 8, "trn2.48xlarge");
  Shapes p = buildShapes(partial, 0);
  EXPECT_FALSE(p.torus.fits);
  EXPECT_NE(p.torus.whyNot.find("8 rank(s)"), std::string::npos) << p.torus.whyNot;
}

TEST(Shapes, UnevenNodesFoldIntoOwners) {
  // Nodes of 3, 2 and 2 ranks: two positions own parts; rank 2 (position 2 of node 0) folds
  // into rank 0.
  auto t = topology::Topology::build(topology::groupByHost({7, 7, 7, 8, 8, 9, 9}), {},
                                     std::vector<int>(7, -1))
               .value();
  Shapes folded = buildShapes(t, 2);
  ASSERT_TRUE(folded.hierarchical.fits);
  EXPECT_EQ(folded.hierarchical.owners, 2);
  EXPECT_FALSE(folded.hierarchical.uniform);
  EXPECT_EQ(folded.hierarchical.foldInto, 0);
  Shapes owner = buildShapes(t, 0);
  EXPECT_EQ(owner.hierarchical.folded, (std::vector<int>{2}));
  EXPECT_EQ(owner.hierarchical.inner.ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(owner.hierarchical.outer.ranks, (std::vector<int>{0, 3, 5}));
  Shapes single = buildShapes(job(1, 4, ""), 0);
  EXPECT_FALSE(single.hierarchical.fits);
}

// Plans with this machine's cost defaults, or with the device graph's hardware figures.
Planner plannerFor(const topology::Topology& t, const Shapes& shapes, int rank,
                   const std::string& algo, bool deviceLinks, bool hardware = false) {
  CommView view;
  view.rank = rank;
  view.nranks = t.nranks();
  view.allLocal = t.nnodes() == 1;
  view.deviceLinks = deviceLinks;
  view.ring = RingGroup::of(t.ringOrder(), rank);
  view.topology = &t;
  view.shapes = &shapes;
  return Planner(view, parseAlgoOverrides(algo).value(),
                 hardware ? hardwareCosts(t.devices()) : machineCosts());
}

TEST(Planner, FollowsTheTopologyAndRefusesShapesThatDoNotFit) {
  auto trn2 = job(1, 16, "trn2.48xlarge");
  Shapes s = buildShapes(trn2, 0);
  auto p = plannerFor(trn2, s, 0, "", true, true);
  EXPECT_EQ(p.choose(CollKind::kAllReduce, 1 << 20).value(), Algorithm::kTorus);
  EXPECT_EQ(p.choose(CollKind::kAllReduce, 1024).value(), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(p.choose(CollKind::kBroadcast, 1 << 20).value(), Algorithm::kRing);
  auto plain = job(1, 4, "");
  Shapes ps = buildShapes(plain, 0);
  EXPECT_EQ(plannerFor(plain, ps, 0, "", false).choose(CollKind::kAllReduce, 1 << 20).value(),
            Algorithm::kDirect);
  auto refused = plannerFor(plain, ps, 0, "allreduce:torus", false).choose(CollKind::kAllReduce, 8);
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.status().message().find("torus"), std::string::npos);
  EXPECT_NE(refused.status().message().find("no device graph"), std::string::npos)
      << refused.status().message();
  auto hier = plannerFor(plain, ps, 0, "hierarchical", false).choose(CollKind::kBroadcast, 8);
  ASSERT_FALSE(hier.isOk());
  EXPECT_NE(hier.status().message().find("one node"), std::string::npos);
  // The global form leaves collectives without that algorithm to the planner.
  EXPECT_EQ(plannerFor(trn2, s, 0, "torus", true).choose(CollKind::kBarrier, 0).value(),
            Algorithm::kRing);
  auto nodes = job(2, 2, "");
  Shapes ns = buildShapes(nodes, 0);
  auto np = plannerFor(nodes, ns, 0, "", false);
  EXPECT_EQ(np.choose(CollKind::kAllReduce, 64 << 20).value(), Algorithm::kHierarchical);
  EXPECT_EQ(np.choose(CollKind::kAllToAll, 64).value(), Algorithm::kHierarchical);
  EXPECT_EQ(np.choose(CollKind::kAllToAll, 1 << 20).value(), Algorithm::kRing);
  EXPECT_EQ(np.choose(CollKind::kAllToAllv, 0).value(), Algorithm::kHierarchical);
  EXPECT_NE(plannerFor(nodes, ns, 0, "^hierarchical", false)
                .choose(CollKind::kAllReduce, 1 << 20)
                .value(),
            Algorithm::kHierarchical);
}

// All-to-all-v's sizes differ between ranks: one algorithm for every size, the one least worse
// than the best at its worst size (recomputed here from ranked()). Across 2 nodes x 2 ranks that
// is the node-aggregated form, which past TRNCCL_AGGREGATE_MAX_BYTES sends its blocks straight
// and is then modeled as the pairwise exchange.
TEST(Planner, AllToAllvTakesTheLeastRegretForEverySize) {
  auto nodes = job(2, 2, "");
  Shapes ns = buildShapes(nodes, 0);
  auto np = plannerFor(nodes, ns, 0, "", false);
  const Algorithm chosen = np.choose(CollKind::kAllToAllv, 0).value();
  EXPECT_EQ(chosen, Algorithm::kHierarchical);
  std::map<Algorithm, double> worst;
  for (size_t bytes = 1; bytes <= (size_t{1} << 34); bytes *= 2) {
    EXPECT_EQ(np.choose(CollKind::kAllToAllv, bytes).value(), chosen) << bytes;
    const auto options = np.ranked(CollKind::kAllToAllv, bytes);
    ASSERT_FALSE(options.empty());
    for (const auto& o : options)
      worst[o.algo] = std::max(worst[o.algo], o.us / options.front().us);
  }
  for (const auto& [algo, w] : worst) EXPECT_LE(worst[chosen], w) << algorithmName(algo);
  auto ranked = [&](size_t bytes, Algorithm algo) {
    for (const auto& o : np.ranked(CollKind::kAllToAll, bytes))
      if (o.algo == algo) return o.us;
    return -1.0;
  };
  // Blocks of 1 MiB go straight: modeled as the pairwise exchange (which a tie leaves chosen).
  EXPECT_DOUBLE_EQ(ranked(4 << 20, Algorithm::kHierarchical), ranked(4 << 20, Algorithm::kRing));
  EXPECT_EQ(np.choose(CollKind::kAllToAll, 1 << 20).value(), Algorithm::kRing);
  // Blocks of 1 KiB are aggregated, fewer messages across nodes.
  EXPECT_LT(ranked(4 << 10, Algorithm::kHierarchical), ranked(4 << 10, Algorithm::kRing));
}

// The hierarchical and torus all-reduce run in pipelined slices whose count the planner
// chooses per size: the power of two (up to kMaxPipelineSlices) with the least modeled time,
// recomputed here from modeledUs. Small calls go whole and large ones in slices, never fewer
// for a larger call; a forced algorithm gets its own best count; TRNCCL_PIPELINE_CHUNKS
// (CommView::pipelineChunks) overrides every size; the other algorithms take one.
TEST(Planner, SlicesAreTheModelsCheapestCountAtEverySize) {
  for (bool hardware : {false, true}) {
    auto t = hardware ? job(2, 16, "trn2.48xlarge") : job(2, 2, "");
    Shapes shapes = buildShapes(t, 0);
    const Algorithm algo = hardware ? Algorithm::kTorus : Algorithm::kHierarchical;
    auto planner = plannerFor(t, shapes, 0, "", hardware, hardware);
    int previous = 1;
    for (size_t bytes = 1; bytes <= (size_t{1} << 34); bytes *= 2) {
      const int slices = planner.slicesFor(CollKind::kAllReduce, bytes, algo);
      double best =
          modeledUs(algo, CollKind::kAllReduce, bytes, planner.shape(), planner.costs(), slices);
      for (int other = 1; other <= kMaxPipelineSlices && static_cast<size_t>(other) <= bytes;
           other *= 2)
        EXPECT_LE(best, modeledUs(algo, CollKind::kAllReduce, bytes, planner.shape(),
                                  planner.costs(), other))
            << bytes << " B: " << slices << " slices against " << other;
      EXPECT_GE(slices, previous) << bytes << " B";
      previous = slices;
      EXPECT_EQ(planner.slicesFor(CollKind::kAllReduce, bytes, Algorithm::kRing), 1);
      EXPECT_EQ(planner.slicesFor(CollKind::kAllGather, bytes, algo), 1);
    }
    EXPECT_EQ(planner.slicesFor(CollKind::kAllReduce, 1024, algo), 1);
    EXPECT_GT(planner.slicesFor(CollKind::kAllReduce, size_t{1} << 34, algo), 1);
    // The plan's ranges carry the count and say it.
    bool sliced = false;
    for (const PlanRange& range : planner.ranges(CollKind::kAllReduce))
      if (range.algo == algo && range.slices > 1) sliced = true;
    EXPECT_TRUE(sliced);
    EXPECT_NE(planner.planTable().find(std::string(algorithmName(algo)) + "("), std::string::npos)
        << planner.planTable();
    // Forced, the algorithm still gets its own count.
    auto forced = plannerFor(t, shapes, 0, std::string("allreduce:") + algorithmName(algo),
                             hardware, hardware);
    EXPECT_EQ(forced.slicesFor(CollKind::kAllReduce, 64 << 20, algo),
              planner.slicesFor(CollKind::kAllReduce, 64 << 20, algo));
  }
  // A costlier slice never buys more of them.
  auto t = job(2, 2, "");
  Shapes shapes = buildShapes(t, 0);
  CommView view;
  view.nranks = t.nranks();
  view.allLocal = false;
  view.ring = RingGroup::of(t.ringOrder(), 0);
  view.topology = &t;
  view.shapes = &shapes;
  CostParams free = machineCosts(), dear = machineCosts();
  free.sliceUs = 0;
  dear.sliceUs = 1000;
  const Planner cheap(view, parseAlgoOverrides("").value(), free);
  const Planner costly(view, parseAlgoOverrides("").value(), dear);
  for (size_t bytes = 1 << 20; bytes <= (size_t{1} << 30); bytes *= 4)
    EXPECT_GE(cheap.slicesFor(CollKind::kAllReduce, bytes, Algorithm::kHierarchical),
              costly.slicesFor(CollKind::kAllReduce, bytes, Algorithm::kHierarchical))
        << bytes;
  EXPECT_GT(cheap.slicesFor(CollKind::kAllReduce, 64 << 20, Algorithm::kHierarchical),
            costly.slicesFor(CollKind::kAllReduce, 64 << 20, Algorithm::kHierarchical));
  // TRNCCL_PIPELINE_CHUNKS: that many at every size, for both algorithms that slice.
  view.pipelineChunks = 3;
  const Planner pinned(view, parseAlgoOverrides("").value());
  for (size_t bytes : {size_t{8}, size_t{1} << 20, size_t{1} << 30})
    EXPECT_EQ(pinned.slicesFor(CollKind::kAllReduce, bytes, Algorithm::kHierarchical), 3);
  EXPECT_EQ(pinned.slicesFor(CollKind::kAllReduce, 1 << 20, Algorithm::kRing), 1);
}

}  // namespace
}  // namespace trnccl
