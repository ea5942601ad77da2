// The one topology model every layer reads (docs/TOPOLOGY.md): how the job's ranks sit on
// nodes (local ranks, node leaders), the machine's Neuron chips and NeuronLinks, which rank
// drives which chip, and so which transport carries each pair of ranks. Built once per
// communicator at init; the communicator, the transports and the planner read it.
#pragma once

#include <string>
#include <vector>

#include "topology/device_graph.hpp"
#include "topology/host.hpp"

namespace trnccl::topology {

// What carries the traffic between two ranks, in the order they are chosen: the rank itself,
// a NeuronLink between their chips (same node, linked chips), host shared memory (same
// node), libfabric (anything else). The cost model's link classes are the same four.
enum class LinkClass : uint8_t { kSelf, kNeuronLink, kShm, kEfa };
const char* linkClassName(LinkClass c);

// TRNCCL_TRANSPORT: which classes may be used (self always).
struct TransportSet {
  bool neuronlink = true;
  bool shm = true;
  bool efa = true;
};
Result<TransportSet> parseTransportList(const std::string& text);

// Where the device graph came from.
struct Discovery {
  enum class Kind { kFile, kPreset, kSysfs, kNone };
  Kind kind = Kind::kNone;
  std::string source;  // "TRNCCL_TOPO_FILE=/p", "TRNCCL_TOPO_PRESET=trn2.48xlarge", ...
  DeviceGraph graph;   // empty for kNone
};
const char* discoveryKindName(Discovery::Kind kind);

// The discovery order: TRNCCL_TOPO_FILE, TRNCCL_TOPO_PRESET, the driver's sysfs
// (TRNCCL_NEURON_SYSFS), else none (a host without Neuron devices). Files and presets list
// their NICs; for the other two, withHostNics asks hwloc for this host's (about 25 ms a
// process on the development machine, so communicators do it only to dump the topology; the
// efa transport finds its NICs with the same hwloc code when it opens).
Result<Discovery> discoverDevices(bool withHostNics = true);

// The chip local rank `localRank` of `localSize` drives on a node described by node
// `descNode` of the discovery's graph: TRNCCL_NEURON_DEVICES, else local-rank order; -1 when
// the graph has no chips. More local ranks than chips is refused, naming the source.
Result<int> chipOfLocalRank(const Discovery& found, int descNode, int localRank, int localSize,
                            const std::string& hostName);

class Topology {
 public:
  // chipOfRank: what each rank said it drives (-1: none). Checks that no two ranks of a node
  // drive one chip and that every chip exists.
  static Result<Topology> build(JobLayout layout, Discovery found, std::vector<int> chipOfRank);

  int nranks() const { return static_cast<int>(layout_.nodeOfRank.size()); }
  int nnodes() const { return layout_.nnodes; }
  const JobLayout& layout() const { return layout_; }
  int nodeOf(int rank) const { return layout_.nodeOfRank[rank]; }
  int localRank(int rank) const { return localRankOf_[rank]; }
  int localSize(int rank) const { return layout_.localSize(rank); }
  const std::vector<int>& ranksOfNode(int node) const { return layout_.ranksOfNode[node]; }
  // The lowest rank of each node: the node's representative in inter-node phases.
  int leader(int node) const { return layout_.ranksOfNode[node].front(); }
  // rank -> local rank, -1 for ranks on other nodes than `rank`'s (what shm indexes by).
  std::vector<int> localIndexFrom(int rank) const;

  const Discovery& discovery() const { return found_; }
  const DeviceGraph& devices() const { return found_.graph; }
  bool hasDevices() const { return !found_.graph.empty(); }
  int chipOf(int rank) const { return chipOfRank_[rank]; }
  // The description node a job node is (job nodes fill UltraServers of graph.nodes nodes in
  // order: job node 5 of a trn2u job is node 1 of the second UltraServer).
  int descNode(int node) const { return node % found_.graph.nodes; }
  // The NeuronLink between two ranks' chips (either node, UltraServer links included), or
  // nullptr.
  const DeviceLink* linkBetween(int a, int b) const;
  // The class that carries a -> b, given what TRNCCL_TRANSPORT allows; an error when nothing
  // allowed reaches b. NeuronLink is used between ranks of one node only (emulated over the
  // node's shared memory; UltraServer links across nodes are in the graph for planning, and
  // their traffic goes over efa here).
  Result<LinkClass> classBetween(int a, int b, const TransportSet& allowed) const;

  // The ranks of `node` in an order whose neighbours' chips are linked: a cycle of links when
  // one exists (the ring closes over a link too), else a path, else local-rank order. Ring
  // schedules inside a node go in this order so that their messages stay on NeuronLinks.
  const std::vector<int>& linkOrder(int node) const { return linkOrders_[node]; }
  // Every rank, node by node, each node in linkOrder: the order of whole-communicator rings.
  std::vector<int> ringOrder() const;

  // Multi-line text for trnccl-topo and INFO: nodes, ranks, chips, links, NICs.
  std::string describe() const;

 private:
  JobLayout layout_;
  std::vector<int> localRankOf_;
  Discovery found_;
  std::vector<int> chipOfRank_;
  std::vector<std::vector<int>> linkOrders_;  // per node, searched once by build()
  std::vector<int> searchLinkOrder(int node) const;
};

}  // namespace trnccl::topology
