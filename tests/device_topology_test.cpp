// The device side of the topology model: Neuron sysfs fixture trees (tests/fixtures/
// neuron_sysfs) parse to the right graph, the text format round-trips and refuses each kind of
// mistake naming the line and field, presets hold DESIGN section 6's facts, and a job that does
// not fit a preset is refused. Expected graphs are computed here from the torus rule, not read
// back from the code under test.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "core/env.hpp"
#include "topology/neuron_sysfs.hpp"
#include "topology/presets.hpp"
#include "topology/topology.hpp"
#include "transports/neuronlink/neuronlink_transport.hpp"

namespace trnccl::topology {
namespace {

const std::string kSysfs = std::string(TRNCCL_FIXTURES_DIR) + "/neuron_sysfs";

// Chip pairs (a < b) of a 4x4 torus, row-major ids: written out from the rule, independently
// of addTorus.
std::set<std::pair<int, int>> torus4x4() {
  std::set<std::pair<int, int>> pairs;
  for (int chip = 0; chip < 16; ++chip) {
    int x = chip % 4, y = chip / 4;
    for (int other : {y * 4 + (x + 1) % 4, ((y + 1) % 4) * 4 + x})
      pairs.insert({std::min(chip, other), std::max(chip, other)});
  }
  return pairs;
}

std::set<std::pair<int, int>> pairsOnNode0(const DeviceGraph& g) {
  std::set<std::pair<int, int>> pairs;
  for (const DeviceLink& l : g.links)
    if (l.nodeA == 0 && l.nodeB == 0) pairs.insert({l.devA, l.devB});
  return pairs;
}

TEST(NeuronSysfs, Trn2TreeIsA4x4TorusOfNeuronLinkV3) {
  auto g = readNeuronSysfs(kSysfs + "/trn2");
  ASSERT_TRUE(g.isOk()) << g.status().message();
  EXPECT_EQ(g.value().devices.size(), 16u);
  EXPECT_EQ(pairsOnNode0(g.value()), torus4x4());
  EXPECT_EQ(g.value().torus[0], 4);
  EXPECT_EQ(g.value().torus[1], 4);
  EXPECT_EQ(g.value().instance, "trn2.48xlarge");
  for (const Device& d : g.value().devices) {
    EXPECT_EQ(d.arch, "trainium2");
    EXPECT_EQ(d.cores, 8);
    EXPECT_EQ(d.coord[0], d.id % 4);
    EXPECT_EQ(d.coord[1], d.id / 4);
  }
  for (const DeviceLink& l : g.value().links) {
    EXPECT_EQ(l.kind, "neuronlink-v3");
    EXPECT_EQ(l.bandwidthGBps, 256);
  }
  // The driver's own listing for chip 0 (as neuron-ls prints it): 12, 3, 4, 1.
  EXPECT_EQ(g.value().neighbours(0, 0), (std::vector<int>{1, 3, 4, 12}));
}

TEST(NeuronSysfs, Trn1TreeMatchesTheTrn1Preset) {
  auto g = readNeuronSysfs(kSysfs + "/trn1");
  ASSERT_TRUE(g.isOk()) << g.status().message();
  auto p = preset("trn1.32xlarge");
  ASSERT_TRUE(p.isOk());
  EXPECT_EQ(g.value().links, p.value().links);  // kinds and bandwidths included
  EXPECT_EQ(g.value().devices, p.value().devices);
  for (const Device& d : g.value().devices) EXPECT_EQ(d.cores, 2);
}

TEST(NeuronSysfs, PartialTreeKeepsTheLinksThatExist) {
  // neuron0 lists 1, 3 and a chip 7 that is not there; 2-3 is listed by neither side.
  auto g = readNeuronSysfs(kSysfs + "/partial");
  ASSERT_TRUE(g.isOk()) << g.status().message();
  EXPECT_EQ(g.value().devices.size(), 4u);
  EXPECT_EQ(pairsOnNode0(g.value()), (std::set<std::pair<int, int>>{{0, 1}, {0, 3}, {1, 2}}));
  EXPECT_EQ(g.value().torus[0], 0);  // a path, not a torus
}

TEST(NeuronSysfs, MalformedListNamesTheFileAndTheWord) {
  auto g = readNeuronSysfs(kSysfs + "/malformed");
  ASSERT_FALSE(g.isOk());
  EXPECT_NE(g.status().message().find("neuron0/connected_devices"), std::string::npos)
      << g.status().message();
  EXPECT_NE(g.status().message().find("'two'"), std::string::npos) << g.status().message();
}

TEST(NeuronSysfs, NoDriverIsAnEmptyGraph) {
  auto g = readNeuronSysfs(kSysfs + "/does-not-exist");
  ASSERT_TRUE(g.isOk());
  EXPECT_TRUE(g.value().empty());
}

TEST(TopologyFile, EveryPresetAndFixtureRoundTrips) {
  std::vector<DeviceGraph> graphs;
  for (const auto& name : presetNames()) graphs.push_back(preset(name).value());
  for (const char* tree : {"trn1", "trn2", "partial"})
    graphs.push_back(readNeuronSysfs(kSysfs + "/" + tree).value());
  for (const DeviceGraph& g : graphs) {
    const std::string text = toText(g);
    auto back = parseText(text, "test");
    ASSERT_TRUE(back.isOk()) << back.status().message() << "\n" << text;
    EXPECT_EQ(back.value(), g) << text;
    EXPECT_EQ(toText(back.value()), text);
  }
}

TEST(TopologyFile, FractionalBandwidthsRoundTripExactly) {
  DeviceGraph g;
  g.devices.resize(2);
  g.devices[1].id = 1;
  g.links = {DeviceLink{0, 0, 0, 1, "custom", 0.1 + 0.2}};
  g.nics = {Nic{0, "efa0", 1, 12.5}};
  auto back = parseText(toText(g), "test");
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(back.value(), g);
}

struct BadFile {
  const char* text;
  const char* line;   // "line N"
  const char* field;  // "field 'x'"
};

TEST(TopologyFile, EachKindOfMistakeIsRefusedNamingLineAndField) {
  const std::string header = "trnccl-topology 1\n";
  const std::string twoChips = header + "device 0:0\ndevice 0:1\n";
  const std::vector<std::pair<std::string, BadFile>> cases = {
      {"wrong header", {"topology 1\n", "line 1", "field 'topology'"}},
      {"unsupported version", {"trnccl-topology 2\n", "line 1", "field 'version'"}},
      {"unknown keyword", {"trnccl-topology 1\nchip 0:0\n", "line 2", "field 'chip'"}},
      {"bad chip reference", {"trnccl-topology 1\ndevice zero\n", "line 2", "field 'device'"}},
      {"node out of range",
       {"trnccl-topology 1\nnodes 2\ndevice 2:0\n", "line 3", "field 'device'"}},
      {"duplicate device",
       {"trnccl-topology 1\ndevice 0:0\ndevice 0:0\n", "line 3", "field 'device'"}},
      {"unknown device field",
       {"trnccl-topology 1\ndevice 0:0 colour=red\n", "line 2", "field 'colour'"}},
      {"bad core count", {"trnccl-topology 1\ndevice 0:0 cores=-2\n", "line 2", "field 'cores'"}},
      {"short coordinate",
       {"trnccl-topology 1\ndevice 0:0 coord=1,2\n", "line 2", "field 'coord'"}},
      {"link to undeclared chip",
       {"trnccl-topology 1\ndevice 0:0\nlink 0:0 0:5 kind=nl bw=1\n", "line 3", "field 'link'"}},
      {"self link",
       {"trnccl-topology 1\ndevice 0:0\nlink 0:0 0:0 kind=nl bw=1\n", "line 3", "field 'link'"}},
      {"missing bandwidth", {"", "line 4", "field 'bw'"}},
      {"bad bandwidth", {"", "line 4", "field 'bw'"}},
      {"duplicate link", {"", "line 5", "field 'link'"}},
      {"nodes after devices",
       {"trnccl-topology 1\ndevice 0:0\nnodes 2\n", "line 3", "field 'nodes'"}},
      {"nic without name", {"trnccl-topology 1\nnic 0 numa=1\n", "line 2", "field 'name'"}},
      {"torus that does not fit", {"", "torus", "field 'torus'"}},
      {"torus chips not numbered 0..X*Y-1", {"", "torus", "field 'torus'"}},
  };
  for (const auto& [what, bad] : cases) {
    std::string text = bad.text;
    if (what == "missing bandwidth") text = twoChips + "link 0:0 0:1 kind=nl\n";
    if (what == "bad bandwidth") text = twoChips + "link 0:0 0:1 kind=nl bw=fast\n";
    if (what == "duplicate link")
      text = twoChips + "link 0:0 0:1 kind=nl bw=1\nlink 0:1 0:0 kind=nl bw=1\n";
    if (what == "torus that does not fit") text = header + "torus 4 4 1\n" + "device 0:0\n";
    if (what == "torus chips not numbered 0..X*Y-1")
      text = header + "torus 2 2 1\ndevice 0:0\ndevice 0:1\ndevice 0:2\ndevice 0:7\n";
    auto g = parseText(text, "TRNCCL_TOPO_FILE=t.topo");
    ASSERT_FALSE(g.isOk()) << what << " was accepted";
    const std::string m = g.status().message();
    EXPECT_NE(m.find("TRNCCL_TOPO_FILE=t.topo"), std::string::npos) << what << ": " << m;
    EXPECT_NE(m.find(bad.line), std::string::npos) << what << ": " << m;
    EXPECT_NE(m.find(bad.field), std::string::npos) << what << ": " << m;
  }
}

TEST(Presets, HoldTheInstanceFacts) {
  auto trn1 = preset("trn1.32xlarge").value();
  auto trn1n = preset("trn1n.32xlarge").value();
  auto trn2 = preset("trn2.48xlarge").value();
  auto ultra = preset("trn2u.48xlarge").value();
  EXPECT_EQ(pairsOnNode0(trn1), torus4x4());
  EXPECT_EQ(pairsOnNode0(trn2), torus4x4());
  EXPECT_EQ(trn1.nics.size(), 8u);    // 8 x 100 Gbit/s = 800
  EXPECT_EQ(trn1n.nics.size(), 16u);  // 16 x 100 = 1600
  EXPECT_EQ(trn2.nics.size(), 16u);   // 16 x 200 = 3200
  double trn2Nic = 0;
  for (const Nic& n : trn2.nics) trn2Nic += n.gbps;
  EXPECT_EQ(trn2Nic, 3200);
  // Per chip: trn1 4 x 96 = 384 GB/s, trn2 4 x 256 = 1024 GB/s in the node.
  double trn1Chip0 = 0, trn2Chip0 = 0;
  for (const DeviceLink& l : trn1.links)
    trn1Chip0 += (l.devA == 0 || l.devB == 0) ? l.bandwidthGBps : 0;
  for (const DeviceLink& l : trn2.links)
    trn2Chip0 += (l.devA == 0 || l.devB == 0) ? l.bandwidthGBps : 0;
  EXPECT_EQ(trn1Chip0, 384);
  EXPECT_EQ(trn2Chip0, 1024);
  // UltraServer: 4 nodes x 16 chips; each chip ringed to the same chip of the neighbouring
  // nodes, 256 GB/s per chip between nodes.
  EXPECT_EQ(ultra.nodes, 4);
  EXPECT_EQ(ultra.devices.size(), 64u);
  EXPECT_EQ(ultra.links.size(), 64u * 6 / 2);
  for (int node = 0; node < 4; ++node) {
    const DeviceLink* up = ultra.link(node, 5, (node + 1) % 4, 5);
    ASSERT_NE(up, nullptr) << "node " << node;
    EXPECT_EQ(up->bandwidthGBps * 2, 256);
    EXPECT_EQ(ultra.link(node, 5, (node + 1) % 4, 6), nullptr);
  }
  EXPECT_FALSE(preset("trn3.huge").isOk());
}

Discovery presetDiscovery(const std::string& name) {
  Discovery d;
  d.kind = Discovery::Kind::kPreset;
  d.source = "TRNCCL_TOPO_PRESET=" + name;
  d.graph = preset(name).value();
  return d;
}

TEST(Presets, AJobThatDoesNotFitIsRefusedNamingPresetCountsAndVariable) {
  env::ScopedOverride devices(env::kNeuronDevices, nullptr);
  auto chip = chipOfLocalRank(presetDiscovery("trn2.48xlarge"), 0, 3, 40, "hostA");
  ASSERT_FALSE(chip.isOk());
  const std::string m = chip.status().message();
  for (const char* part : {"trn2.48xlarge", "16", "40", "hostA", "TRNCCL_TOPO_PRESET"})
    EXPECT_NE(m.find(part), std::string::npos) << part << " missing from: " << m;
  EXPECT_EQ(chipOfLocalRank(presetDiscovery("trn2.48xlarge"), 0, 15, 16, "h").value(), 15);
}

TEST(Presets, NeuronDevicesMapsLocalRanksToChips) {
  {
    env::ScopedOverride devices(env::kNeuronDevices, "0,1,4,5");
    EXPECT_EQ(chipOfLocalRank(presetDiscovery("trn2.48xlarge"), 0, 2, 4, "h").value(), 4);
    EXPECT_FALSE(chipOfLocalRank(presetDiscovery("trn2.48xlarge"), 0, 0, 5, "h").isOk());
  }
  for (const char* bad : {"0,16", "0,0", "0,x"}) {
    env::ScopedOverride devices(env::kNeuronDevices, bad);
    auto chip = chipOfLocalRank(presetDiscovery("trn2.48xlarge"), 0, 0, 2, "h");
    ASSERT_FALSE(chip.isOk()) << bad;
    EXPECT_NE(chip.status().message().find("TRNCCL_NEURON_DEVICES"), std::string::npos);
  }
}

TEST(Discovery, FileThenPresetThenSysfsThenNone) {
  const std::string file = ::testing::TempDir() + "/trnccl-two-chips.topo";
  FILE* out = std::fopen(file.c_str(), "w");
  std::fputs("trnccl-topology 1\ndevice 0:0\ndevice 0:1\nlink 0:0 0:1 kind=nl bw=5\n", out);
  std::fclose(out);
  env::ScopedOverride sysfs(env::kNeuronSysfs, (kSysfs + "/trn1").c_str());
  {
    env::ScopedOverride f(env::kTopoFile, file.c_str());
    env::ScopedOverride p(env::kTopoPreset, "trn2.48xlarge");
    auto d = discoverDevices();
    ASSERT_TRUE(d.isOk()) << d.status().message();
    EXPECT_EQ(d.value().kind, Discovery::Kind::kFile);
    EXPECT_EQ(d.value().graph.devices.size(), 2u);
  }
  {
    env::ScopedOverride f(env::kTopoFile, nullptr);
    env::ScopedOverride p(env::kTopoPreset, "trn2.48xlarge");
    EXPECT_EQ(discoverDevices().value().kind, Discovery::Kind::kPreset);
  }
  {
    env::ScopedOverride f(env::kTopoFile, nullptr);
    env::ScopedOverride p(env::kTopoPreset, nullptr);
    auto d = discoverDevices();
    EXPECT_EQ(d.value().kind, Discovery::Kind::kSysfs);
    EXPECT_EQ(d.value().graph.devices.front().arch, "trainium1");
    env::ScopedOverride none(env::kNeuronSysfs, (kSysfs + "/does-not-exist").c_str());
    EXPECT_EQ(discoverDevices().value().kind, Discovery::Kind::kNone);
  }
  {
    env::ScopedOverride f(env::kTopoFile, (file + ".missing").c_str());
    auto d = discoverDevices();
    ASSERT_FALSE(d.isOk());
    EXPECT_NE(d.status().message().find("TRNCCL_TOPO_FILE"), std::string::npos);
  }
}

TEST(Discovery, SysfsAndNoneTakeTheHostNicsFromHwloc) {
  // The hwloc fixture: two packages, two EFA devices behind each.
  env::ScopedOverride xml(
      env::kTopoXml, (std::string(TRNCCL_FIXTURES_DIR) + "/trn_two_numa_four_efa.xml").c_str());
  env::ScopedOverride f(env::kTopoFile, nullptr);
  env::ScopedOverride p(env::kTopoPreset, nullptr);
  for (const char* tree : {"trn2", "does-not-exist"}) {
    env::ScopedOverride sysfs(env::kNeuronSysfs, (kSysfs + "/" + tree).c_str());
    auto d = discoverDevices();
    ASSERT_TRUE(d.isOk()) << d.status().message();
    std::vector<std::pair<std::string, int>> nics;
    for (const Nic& n : d.value().graph.nics) nics.emplace_back(n.name, n.numa);
    EXPECT_EQ(nics,
              (std::vector<std::pair<std::string, int>>{
                  {"rdmap144s27", 1}, {"rdmap160s27", 1}, {"rdmap16s27", 0}, {"rdmap32s27", 0}}))
        << tree;
    // They round-trip through the file format like everything else.
    EXPECT_EQ(parseText(toText(d.value().graph), "test").value(), d.value().graph);
  }
}

// Two emulated nodes of a trn2 UltraServer, 4 ranks each on chips 0-3 (a ring of the torus).
Topology ultraSlice() {
  JobLayout layout = groupByHost({1, 1, 1, 1, 2, 2, 2, 2});
  auto t = Topology::build(layout, presetDiscovery("trn2u.48xlarge"), {0, 1, 2, 3, 0, 1, 2, 3});
  EXPECT_TRUE(t.isOk()) << t.status().message();
  return t.value();
}

TEST(Topology, ChoosesSelfNeuronLinkShmEfaInThatOrder) {
  Topology t = ultraSlice();
  TransportSet all;
  EXPECT_EQ(t.classBetween(0, 0, all).value(), LinkClass::kSelf);
  EXPECT_EQ(t.classBetween(0, 1, all).value(), LinkClass::kNeuronLink);
  EXPECT_EQ(t.classBetween(0, 3, all).value(), LinkClass::kNeuronLink);  // the row wraps
  EXPECT_EQ(t.classBetween(0, 2, all).value(), LinkClass::kShm);         // not linked
  // Chip 0 of node 0 and chip 0 of node 1 are linked across the UltraServer, but emulation
  // carries traffic between nodes over efa.
  EXPECT_NE(t.linkBetween(0, 4), nullptr);
  EXPECT_EQ(t.classBetween(0, 4, all).value(), LinkClass::kEfa);
  EXPECT_EQ(t.leader(1), 4);
  EXPECT_EQ(t.localRank(6), 2);
  TransportSet noNeuronLink = parseTransportList("shm,efa").value();
  EXPECT_EQ(t.classBetween(0, 1, noNeuronLink).value(), LinkClass::kShm);
  TransportSet linksOnly = parseTransportList("neuronlink").value();
  EXPECT_EQ(t.classBetween(0, 1, linksOnly).value(), LinkClass::kNeuronLink);
  EXPECT_FALSE(t.classBetween(0, 2, linksOnly).isOk());
  EXPECT_FALSE(parseTransportList("nvlink").isOk());
}

TEST(Topology, TwoRanksOnOneChipAreRefused) {
  JobLayout layout = groupByHost({1, 1});
  auto t = Topology::build(layout, presetDiscovery("trn2.48xlarge"), {3, 3});
  ASSERT_FALSE(t.isOk());
  EXPECT_NE(t.status().message().find("both drive Neuron chip 3"), std::string::npos)
      << t.status().message();
}

// A lower layer that records what reached it: the neuronlink transport must refuse an
// unlinked peer before anything is handed to the carrier.
class RecordingCarrier : public Transport {
 public:
  const char* name() const override { return "recording"; }
  Result<bool> progressSend(TransferOp&) override {
    ++sends;
    return true;
  }
  Result<bool> progressRecv(TransferOp&) override {
    ++recvs;
    return true;
  }
  int sends = 0, recvs = 0;
};

TEST(NeuronLinkTransport, RefusesUnlinkedChipsAsAnInternalError) {
  Topology t = ultraSlice();
  RecordingCarrier carrier;
  neuronlink::NeuronLinkTransport nl(carrier, 0, t);
  TransferOp linked;
  linked.peer = 1;
  EXPECT_TRUE(nl.progressSend(linked).isOk());
  EXPECT_TRUE(nl.progressRecv(linked).isOk());
  for (int peer : {2, 4, 0}) {  // unlinked, another node, itself
    TransferOp op;
    op.peer = peer;
    auto sent = nl.progressSend(op);
    ASSERT_FALSE(sent.isOk()) << "peer " << peer;
    EXPECT_EQ(sent.status().code(), Code::kInternalError);
    EXPECT_NE(sent.status().message().find("not linked"), std::string::npos);
    EXPECT_FALSE(nl.progressRecv(op).isOk());
  }
  EXPECT_EQ(carrier.sends, 1);
  EXPECT_EQ(carrier.recvs, 1);
}

}  // namespace
}  // namespace trnccl::topology
