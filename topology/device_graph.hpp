// The machine as the Neuron devices see it: chips per node, the NeuronLinks between them (with
// their class and bandwidth), the torus they form, and the node's EFA NICs. A DeviceGraph
// describes one node, or the several nodes of an UltraServer whose chips are linked across
// nodes; it comes from a topology file, a preset or the Neuron driver's sysfs (discover.hpp)
// and is what docs/TOPOLOGY.md's text format writes and reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace trnccl::topology {

// A chip: `id` is its index on its node (the driver's neuronN), `node` its node within the
// description (0 unless the description spans several nodes).
struct Device {
  int node = 0;
  int id = 0;
  std::string arch;             // "trainium1", "trainium2"; "" = unknown
  int cores = 0;                // NeuronCores; 0 = unknown
  int coord[3] = {-1, -1, -1};  // torus coordinate (x, y, z); -1 = not placed
  bool operator==(const Device&) const = default;
};

// An undirected NeuronLink between two chips, stored with (nodeA, devA) < (nodeB, devB).
struct DeviceLink {
  int nodeA = 0, devA = 0, nodeB = 0, devB = 0;
  std::string kind;          // "neuronlink-v2", "neuronlink-v3", ...
  double bandwidthGBps = 0;  // per direction, GB/s
  bool operator==(const DeviceLink&) const = default;
};

struct Nic {
  int node = 0;
  std::string name;
  int numa = -1;    // NUMA node it is attached to; -1 = unknown
  double gbps = 0;  // Gbit/s; 0 = unknown
  bool operator==(const Nic&) const = default;
};

struct DeviceGraph {
  std::string instance;           // "trn2.48xlarge"; "" = unknown
  int nodes = 1;                  // nodes the description spans (4 for a trn2 UltraServer)
  int torus[3] = {0, 0, 0};       // chips form an x * y * z torus (z across nodes); 0 = none
  std::vector<Device> devices;    // sorted by (node, id)
  std::vector<DeviceLink> links;  // sorted by endpoints
  std::vector<Nic> nics;          // sorted by (node, name)
  bool operator==(const DeviceGraph&) const = default;

  bool empty() const { return devices.empty(); }
  int devicesOnNode(int node) const;
  const Device* device(int node, int id) const;
  // The link between two chips, or nullptr.
  const DeviceLink* link(int nodeA, int devA, int nodeB, int devB) const;
  // Chips of `node` linked to chip `id` of that node (same node only), ascending.
  std::vector<int> neighbours(int node, int id) const;
  // Sorts devices, links and NICs into the canonical order (what toText writes).
  void normalize();
  // "16 chips (trainium2) in a 4x4 torus, 32 NeuronLinks (neuronlink-v3, 256 GB/s), 16 NICs".
  std::string shape() const;
};

// The text format (docs/TOPOLOGY.md). toText(g) parsed back gives g again.
std::string toText(const DeviceGraph& graph);
// `origin` ("TRNCCL_TOPO_FILE=/path") prefixes every error, which also names the line and
// the field that is wrong.
Result<DeviceGraph> parseText(const std::string& text, const std::string& origin);

// Links of an x * y (* z) torus over chips numbered row-major on each node (chip = y*X + x;
// z = the node within the description), each of the given kind and bandwidth; zKind/zGBps
// for the links across nodes. Also places every chip's coordinate. Used by the presets and
// to recognise a torus in a graph read from sysfs.
void addTorus(DeviceGraph& graph, int x, int y, int z, const std::string& kind, double gbps,
              const std::string& zKind, double zGBps);
// If the graph's chips and links are exactly an X x Y torus on one node (row-major ids),
// records the shape and the coordinates and returns true.
bool recogniseTorus(DeviceGraph& graph);

}  // namespace trnccl::topology
