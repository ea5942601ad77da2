// Named machine descriptions (TRNCCL_TOPO_PRESET), from AWS's published instance facts
// (DESIGN.md section 6; docs/TOPOLOGY.md lists the sources and what is assumed):
// - trn1.32xlarge: 16 Trainium chips (2 NeuronCores each) in a 4x4 2D torus of NeuronLink-v2,
//   4 links per chip, 384 GB/s per chip (so 96 GB/s per link and direction, assumed evenly
//   split); EFA 800 Gbit/s on 8 devices. trn1n.32xlarge: the same chips, 1600 Gbit/s on 16.
// - trn2.48xlarge: 16 Trainium2 chips (8 NeuronCores each) in a 4x4 torus of NeuronLink-v3,
//   1024 GB/s per chip in the node (256 GB/s per link); EFAv3 3.2 Tbit/s = 16 x 200 Gbit/s.
// - trn2u.48xlarge (UltraServer): 4 trn2 nodes; chips with the same position are ringed across
//   the 4 nodes (the torus's third dimension), 256 GB/s per chip between nodes (two z links:
//   128 GB/s each).
#include "topology/presets.hpp"

namespace trnccl::topology {
namespace {

DeviceGraph torusMachine(const std::string& instance, int nodes, const std::string& arch, int cores,
                         const std::string& kind, double linkGBps, double zLinkGBps, int nics,
                         double nicGbps) {
  DeviceGraph g;
  g.instance = instance;
  for (int node = 0; node < nodes; ++node) {
    for (int id = 0; id < 16; ++id) {
      Device d;
      d.node = node;
      d.id = id;
      d.arch = arch;
      d.cores = cores;
      g.devices.push_back(d);
    }
    // NICs split evenly over the two NUMA nodes, as on the two-socket hosts.
    for (int i = 0; i < nics; ++i)
      g.nics.push_back({node, strformat("efa%d", i), i < nics / 2 ? 0 : 1, nicGbps});
  }
  addTorus(g, 4, 4, nodes, kind, linkGBps, kind + "-z", zLinkGBps);
  return g;
}

}  // namespace

const std::vector<std::string>& presetNames() {
  static const std::vector<std::string> names = {"trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge",
                                                 "trn2u.48xlarge"};
  return names;
}

Result<DeviceGraph> preset(const std::string& name) {
  if (name == "trn1.32xlarge")
    return torusMachine(name, 1, "trainium1", 2, "neuronlink-v2", 96, 0, 8, 100);
  if (name == "trn1n.32xlarge")
    return torusMachine(name, 1, "trainium1", 2, "neuronlink-v2", 96, 0, 16, 100);
  if (name == "trn2.48xlarge")
    return torusMachine(name, 1, "trainium2", 8, "neuronlink-v3", 256, 0, 16, 200);
  if (name == "trn2u.48xlarge")
    return torusMachine(name, 4, "trainium2", 8, "neuronlink-v3", 256, 128, 16, 200);
  std::string known;
  for (const auto& n : presetNames()) {
    if (!known.empty()) known += ", ";
    known += n;
  }
  return makeError(Code::kInvalidArgument,
                   "TRNCCL_TOPO_PRESET='%s' is not a known preset (known: %s)", name.c_str(),
                   known.c_str());
}

}  // namespace trnccl::topology
