// The cost model the planner chooses algorithms with: per link class a latency (alpha, per
// message) and a bandwidth (beta = 1 / GB/s), a software cost per schedule round, and the
// host's copy and reduction speeds; per algorithm a formula in rounds and bytes over the links
// its rounds take (cost_model.cpp). The numbers come from this machine's measurements
// (machineCosts), from the device graph's figures for real Neuron hardware (hardwareCosts), and
// a tuning file (TRNCCL_TUNING_FILE, written by trnccl-tune) overrides any of them.
// docs/PLANNER.md states every default and where it came from.
#pragma once

#include <string>
#include <vector>

#include "collectives/algorithm.hpp"
#include "topology/topology.hpp"

namespace trnccl {

struct LinkCost {
  double alphaUs = 0;  // per message, microseconds
  double gbps = 1;     // GB/s, one direction, one rank's share
};

inline constexpr int kLinkClassCount = 4;  // topology::LinkClass: self, neuronlink, shm, efa

// A measured choice of the MoE engine's mode (trnccl-tune --moe) for groups in auto mode on
// `ranks` ranks over `nodes` nodes: the entry whose tokens is nearest (in ratio) to a group's
// maxDispatchTokensPerRank decides. hiddenBytes and topk record the shape it was measured on.
struct MoeTuning {
  int ranks = 0, nodes = 0;
  long tokens = 0;
  std::string mode;  // "normal", "low_latency" or "hierarchical"
  long hiddenBytes = 0;
  int topk = 0;
  int line = 0;  // in the tuning file, for the INFO log
};

struct CostParams {
  LinkCost link[kLinkClassCount];
  double stepUs = 0;      // software cost of one schedule round (posting, progress passes)
  double syncUs = 0;      // one post-and-wait of the shared-window protocol (direct)
  double copyGBps = 1;    // a rank copying into or out of shared windows
  double reduceGBps = 1;  // a reduction, counted in bytes of output
  // What one more pipelined slice costs beyond its messages' modeled times (its rounds'
  // synchronisations and scheduling where every stage runs on the same cores).
  double sliceUs = 0;
  // The efa figures are a node's whole capacity, which ranks sending across nodes in the same
  // round share (loopback: the host kernel on the same cores), not each rank's own share.
  bool efaShared = false;
  std::string origin;  // "this machine's defaults", "TRNCCL_TUNING_FILE=/p", ...
  std::vector<MoeTuning> moe;
  // The entry for a group of ranks over nodes routing up to tokens per rank, or nullptr.
  const MoeTuning* moeEntry(int ranks, int nodes, long tokens) const;
  const LinkCost& of(topology::LinkClass c) const { return link[static_cast<int>(c)]; }
  LinkCost& of(topology::LinkClass c) { return link[static_cast<int>(c)]; }
};

// Measured on the development machine (no accelerator; neuronlink is emulated over shm there,
// so it gets shm's figures; efa is libfabric over loopback).
CostParams machineCosts();
// For real Neuron hardware: NeuronLink and EFA from the graph's link and NIC figures, with the
// latencies docs/PLANNER.md states; host-side numbers from machineCosts.
CostParams hardwareCosts(const topology::DeviceGraph& graph);

// The tuning file: "trnccl-tuning 1", then lines "link <class> alpha_us=<x> gbps=<y>",
// "step_us <x>", "sync_us <x>", "copy_gbps <x>", "reduce_gbps <x>", and MoE entries "moe ranks=<n>
// nodes=<m> tokens=<t> mode=<normal|low_latency|hierarchical> [hidden_bytes=<b>] [topk=<k>]";
// '#' starts a comment. Fields it does not name keep base's values. Errors name origin, the line
// and the field.
Result<CostParams> parseTuning(const std::string& text, const std::string& origin, CostParams base);
std::string tuningText(const CostParams& costs);
// The costs a communicator (or trnccl-topo) plans with: hardwareCosts when the device graph
// came from the Neuron driver, else machineCosts; then the tuning file at tuningPath, if any.
Result<CostParams> loadCosts(const topology::Discovery& found, const std::string& tuningPath);

// What a plan depends on besides the call: the communicator's shape as the algorithms see it.
struct PlanShape {
  int nranks = 1;
  int nodes = 1;
  int perNode = 1;  // ranks on the smallest node
  bool allLocal = true;
  bool uniform = true;  // every node has perNode ranks
  // The class of a hop between ring neighbours inside a node (neuronlink along a device graph,
  // else shm), and between nodes.
  topology::LinkClass intra = topology::LinkClass::kShm;
  bool hierarchicalFits = false;
  bool torusFits = false;
  std::vector<int> torusDims;  // torus level sizes (x, y, then z or nodes)
  int torusNodeLevel = -1;     // which torus level crosses nodes (-1: none)
  size_t windowBytes = 256 << 10;
  size_t llMaxBytes = 64;
  size_t oneShotMaxBytes = 16 << 10;
  size_t aggregateMaxBytes = 16 << 10;  // CommView::aggregateMaxBytes
  CmaBand cma;                          // CommView::cma
  bool oversubscribed = false;          // CommView::oversubscribed
};

PlanShape planShapeOf(const CommView& view);

// Modeled time in microseconds of algo running kind on a call of `bytes` (as nccl-tests counts
// a call's size: the buffer for all-reduce, broadcast and reduce; the whole output of an
// all-gather, the whole input of a reduce-scatter, a rank's whole send buffer for all-to-all),
// or infinity when the model has no formula for it or the shape does not fit. pipelineSlices:
// the slices a hierarchical or torus all-reduce is cut into.
double modeledUs(Algorithm algo, CollKind kind, size_t bytes, const PlanShape& shape,
                 const CostParams& costs, int pipelineSlices = 1);

// Whether algo runs kind in pipelined slices (the hierarchical and torus all-reduce: one
// slice's exchange across nodes overlaps the next slice's phase inside the node), whose count
// the planner chooses: a power of two up to kMaxPipelineSlices.
bool runsInSlices(Algorithm algo, CollKind kind);
inline constexpr int kMaxPipelineSlices = 64;

}  // namespace trnccl
