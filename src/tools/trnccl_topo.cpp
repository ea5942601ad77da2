// trnccl-topo: the topology trnccl sees (nodes, ranks, chips, NeuronLinks, NICs) for this
// machine, a topology file or a preset at any node count; --dump writes it in the
// TRNCCL_TOPO_FILE format; --stats sums the traffic files ranks wrote (TRNCCL_TRAFFIC_DIR) per
// link.
#include <dirent.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>

#include "core/env.hpp"
#include "core/text_file.hpp"
#include "topology/topology.hpp"

using namespace trnccl;

namespace {

const char* kUsage =
    "usage: trnccl-topo [--file PATH | --preset NAME] [--nodes N] [--ranks-per-node N]\n"
    "                   [--dump FILE]\n"
    "       trnccl-topo --stats DIR\n"
    "\n"
    "Prints the topology trnccl discovers: where it came from, the chips of each node, their\n"
    "NeuronLinks (class, GB/s), the NICs, and which rank drives which chip in a job of N nodes\n"
    "(default 1) with the given ranks per node (default: one per chip, or 1 without chips).\n"
    "Discovery order, as in a job: --file / TRNCCL_TOPO_FILE, --preset / TRNCCL_TOPO_PRESET\n"
    "(trn1.32xlarge, trn1n.32xlarge, trn2.48xlarge, trn2u.48xlarge), the Neuron driver's sysfs\n"
    "(TRNCCL_NEURON_SYSFS), else none. TRNCCL_NEURON_DEVICES maps local ranks to chips.\n"
    "  --dump FILE   also write the topology in the TRNCCL_TOPO_FILE format (loads back the same)\n"
    "  --stats DIR   sum the files a job wrote with TRNCCL_TRAFFIC_DIR=DIR: messages and bytes\n"
    "                per link (chip pair) and per transport\n";

int stats(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) {
    std::fprintf(stderr, "trnccl-topo: cannot open %s: %s\n", dir.c_str(), std::strerror(errno));
    return 1;
  }
  // (transport, node, lower chip or rank, higher chip or rank) -> messages, bytes; counted on
  // the sending side only, so each message counts once.
  std::map<std::tuple<std::string, int, int, int>,
           std::pair<unsigned long long, unsigned long long>>
      links;
  std::map<std::string, std::pair<unsigned long long, unsigned long long>> perTransport;
  int files = 0;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("traffic.", 0) != 0) continue;
    std::ifstream in(dir + "/" + name);
    std::string line;
    int rank = -1, node = -1, chip = -1;
    ++files;
    while (std::getline(in, line)) {
      std::istringstream w(line);
      std::string key;
      w >> key;
      if (key == "rank") {
        std::string k;
        int nranks;
        w >> rank >> k >> nranks >> k >> node >> k >> chip;
      } else if (key == "peer") {
        int peer, peerChip;
        std::string k, via;
        unsigned long long sm, sb, rm, rb;
        w >> peer >> k >> via >> k >> peerChip >> k >> sm >> sb >> k >> rm >> rb;
        if (!w || sm == 0) continue;
        const bool chips = chip >= 0 && peerChip >= 0 && via == "neuronlink";
        int a = chips ? chip : rank, b = chips ? peerChip : peer;
        if (a > b) std::swap(a, b);
        auto& l = links[{via, chips ? node : -1, a, b}];
        l.first += sm;
        l.second += sb;
        perTransport[via].first += sm;
        perTransport[via].second += sb;
      }
    }
  }
  closedir(d);
  std::printf("# %d traffic file(s) in %s; messages and bytes as sent, both directions summed\n",
              files, dir.c_str());
  std::printf("%-11s %-22s %12s %16s\n", "transport", "link", "messages", "bytes");
  for (const auto& [key, v] : links) {
    const auto& [via, node, a, b] = key;
    std::string link = node >= 0 ? strformat("node%d chip%d-chip%d", node, a, b)
                                 : strformat("rank%d-rank%d", a, b);
    std::printf("%-11s %-22s %12llu %16llu\n", via.c_str(), link.c_str(), v.first, v.second);
  }
  for (const auto& [via, v] : perTransport)
    std::printf("total %-16s %22llu %16llu\n", via.c_str(), v.first, v.second);
  return files > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string file, presetName, dumpPath, statsDir;
  int nodes = 1, ranksPerNode = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "trnccl-topo: %s needs a value\n%s", arg.c_str(), kUsage);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else if (arg == "--file") {
      file = value();
    } else if (arg == "--preset") {
      presetName = value();
    } else if (arg == "--nodes") {
      nodes = std::atoi(value().c_str());
    } else if (arg == "--ranks-per-node") {
      ranksPerNode = std::atoi(value().c_str());
    } else if (arg == "--dump") {
      dumpPath = value();
    } else if (arg == "--stats") {
      statsDir = value();
    } else {
      std::fprintf(stderr, "trnccl-topo: unknown argument '%s'\n%s", arg.c_str(), kUsage);
      return 2;
    }
  }
  if (!statsDir.empty()) return stats(statsDir);
  if (nodes < 1 || nodes > 65536 || ranksPerNode < 0) {
    std::fprintf(stderr, "trnccl-topo: --nodes must be 1-65536 and --ranks-per-node >= 0\n");
    return 2;
  }
  // The command line stands in for the variables, so discovery runs exactly as in a job.
  if (!file.empty()) setenv(env::kTopoFile.name, file.c_str(), 1);
  if (!presetName.empty()) {
    unsetenv(env::kTopoFile.name);
    setenv(env::kTopoPreset.name, presetName.c_str(), 1);
  }
  auto found = topology::discoverDevices();
  if (!found.isOk()) {
    std::fprintf(stderr, "trnccl-topo: %s\n", found.status().message().c_str());
    return 1;
  }
  const topology::DeviceGraph& graph = found.value().graph;
  const int descNodes = std::max(1, graph.nodes);
  if (ranksPerNode == 0) ranksPerNode = graph.empty() ? 1 : graph.devicesOnNode(0);
  topology::JobLayout layout;
  layout.nnodes = nodes;
  layout.ranksOfNode.resize(nodes);
  std::vector<int> chips;
  for (int node = 0; node < nodes; ++node)
    for (int local = 0; local < ranksPerNode; ++local) {
      const int rank = static_cast<int>(layout.nodeOfRank.size());
      layout.nodeOfRank.push_back(node);
      layout.ranksOfNode[node].push_back(rank);
      auto chip = topology::chipOfLocalRank(found.value(), node % descNodes, local, ranksPerNode,
                                            strformat("node%d", node));
      if (!chip.isOk()) {
        std::fprintf(stderr, "trnccl-topo: %s\n", chip.status().message().c_str());
        return 1;
      }
      chips.push_back(chip.value());
    }
  auto topo = topology::Topology::build(layout, found.value(), chips);
  if (!topo.isOk()) {
    std::fprintf(stderr, "trnccl-topo: %s\n", topo.status().message().c_str());
    return 1;
  }
  std::printf("%s", topo.value().describe().c_str());
  if (!dumpPath.empty()) {
    if (Status written = writeTextFile(dumpPath, topology::toText(graph)); !written.isOk()) {
      std::fprintf(stderr, "trnccl-topo: %s\n", written.message().c_str());
      return 1;
    }
    std::printf("written to %s\n", dumpPath.c_str());
  }
  return 0;
}
