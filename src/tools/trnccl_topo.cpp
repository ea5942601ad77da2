// trnccl-topo: the topology trnccl sees (nodes, ranks, chips, NeuronLinks, NICs) for this
// machine, a topology file or a preset at any node count; --dump writes it in the
// TRNCCL_TOPO_FILE format; --plan prints the planner's choices and modeled times for it;
// --stats sums the traffic files ranks wrote (TRNCCL_TRAFFIC_DIR) per link.
#include <dirent.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>

#include "collectives/planner.hpp"
#include "collectives/registry.hpp"
#include "collectives/shapes.hpp"
#include "core/env.hpp"
#include "core/text_file.hpp"
#include "topology/topology.hpp"
#include "transports/shm/cma.hpp"

using namespace trnccl;

namespace {

const char* kUsage =
    "usage: trnccl-topo [--file PATH | --preset NAME] [--nodes N] [--ranks-per-node N]\n"
    "                   [--dump FILE] [--plan [--verbose] [--costs hardware|machine]\n"
    "                   [--tuning FILE] [--cores N]]\n"
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
    "                per link (chip pair) and per transport\n"
    "  --plan        the plan for that job: per collective and size range (sizes as nccl-tests\n"
    "                counts them) the algorithm the cost model picks, its modeled time and\n"
    "                bus bandwidth at the range's upper end (docs/PLANNER.md)\n"
    "  --verbose     with --plan: every candidate's modeled time per range\n"
    "  --costs KIND  hardware: the device graph's link and NIC figures (the default when there\n"
    "                are chips); machine: this machine's measured defaults (what a job here uses)\n"
    "  --tuning FILE a tuning file (trnccl-tune, TRNCCL_TUNING_FILE) over those defaults\n"
    "  --cores N     cores per node (default: this machine's). With this machine's costs the\n"
    "                plan is the one a job here makes at init: whether its ranks outnumber the\n"
    "                cores, and the single-copy (CMA) band init times (TRNCCL_CMA*). Several\n"
    "                nodes: separate machines like this one, unless --cores is given, which\n"
    "                says they are emulated on this machine, each with that share of its\n"
    "                cores (e.g. --cores 1 for 2 nodes on 2 cores)\n";

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

// nccl-tests' bus bandwidth factor: what each rank's links carry relative to the call size.
double busFactor(CollKind kind, int n) {
  switch (kind) {
    case CollKind::kAllReduce: return 2.0 * (n - 1) / n;
    case CollKind::kAllGather:
    case CollKind::kReduceScatter:
    case CollKind::kAllToAll:
    case CollKind::kAllToAllv: return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

// What a job on one of these nodes learns at init besides the topology, when it runs on this
// machine: whether a node's ranks outnumber its cores, and the CMA band the node's first rank
// times (comm_init.cpp, attachSegment). Init also probes that the ranks may read each other;
// the plan assumes they may. The planner sees oversubscription only where every rank shares
// one machine (comm_init.cpp, buildPlanner): one node, or nodes emulated on this machine, which
// --cores giving each node its share says.
Status machineFacts(int ranksPerNode, unsigned cores, bool oneMachine, CommView* view) {
  view->oversubscribed = oneMachine && static_cast<unsigned>(ranksPerNode) > cores;
  auto cma = env::getBool(env::kCma);
  TRNCCL_RETURN_IF_ERROR(cma.status());
  auto minBytes = env::getInt(env::kCmaMinBytes);
  TRNCCL_RETURN_IF_ERROR(minBytes.status());
  auto maxBytes = env::getInt(env::kCmaMaxBytes);
  TRNCCL_RETURN_IF_ERROR(maxBytes.status());
  auto streamBytes = env::getInt(env::kStreamCopyBytes);
  TRNCCL_RETURN_IF_ERROR(streamBytes.status());
  if (!cma.value() || minBytes.value() <= 0 || ranksPerNode < 2) return Status::ok();
  const double slowdown = maxBytes.value() ? 0 : shm::kernelCopySlowdown();
  const uint64_t band =
      shm::cmaMaxBytes(static_cast<uint64_t>(maxBytes.value()), slowdown,
                       static_cast<uint64_t>(streamBytes.value()), view->oversubscribed);
  view->cma = cmaBand(static_cast<uint64_t>(minBytes.value()), band,
                      static_cast<uint64_t>(slowdown * 1000));
  return Status::ok();
}

int printPlan(const topology::Topology& topo, const CostParams& costs, bool verbose,
              bool onThisMachine, unsigned cores, bool coresGiven) {
  const int rank = 0;  // every rank plans alike
  CommView view;
  view.rank = rank;
  view.nranks = topo.nranks();
  view.allLocal = topo.nnodes() == 1;
  view.deviceLinks = false;
  for (int r : topo.ranksOfNode(0))
    if (r != rank && topo.linkBetween(rank, r)) view.deviceLinks = true;
  view.ring = RingGroup::of(topo.ringOrder(), rank);
  view.topology = &topo;
  const Shapes shapes = buildShapes(topo, rank);
  view.shapes = &shapes;
  for (auto [var, into] : {std::pair{&env::kShmChunkBytes, &view.windowBytes},
                           std::pair{&env::kOneShotMaxBytes, &view.oneShotMaxBytes},
                           std::pair{&env::kAggregateMaxBytes, &view.aggregateMaxBytes},
                           std::pair{&env::kLLMaxBytes, &view.llMaxBytes}}) {
    auto value = env::getInt(*var);
    if (!value.isOk()) {
      std::fprintf(stderr, "trnccl-topo: %s\n", value.status().message().c_str());
      return 1;
    }
    *into = static_cast<size_t>(value.value());
  }
  // Bounded as a communicator's init bounds it (comm_init.cpp).
  auto slices = env::getIntBetween(env::kPipelineChunks, 0, kMaxPipelineSlices);
  if (!slices.isOk()) {
    std::fprintf(stderr, "trnccl-topo: %s\n", slices.status().message().c_str());
    return 1;
  }
  view.pipelineChunks = static_cast<int>(slices.value());
  if (onThisMachine) {
    const int ranksPerNode = static_cast<int>(topo.ranksOfNode(0).size());
    if (Status facts = machineFacts(ranksPerNode, cores, topo.nnodes() == 1 || coresGiven, &view);
        !facts.isOk()) {
      std::fprintf(stderr, "trnccl-topo: %s\n", facts.message().c_str());
      return 1;
    }
  }
  auto overrides = parseAlgoOverrides(env::getString(env::kAlgo));
  if (!overrides.isOk()) {
    std::fprintf(stderr, "trnccl-topo: %s\n", overrides.status().message().c_str());
    return 1;
  }
  const Planner planner(view, overrides.value(), costs);
  std::printf("\nplan for %d rank(s) on %d node(s); costs: %s\n%s", view.nranks, topo.nnodes(),
              costs.origin.c_str(), tuningText(costs).c_str());
  std::printf("%-14s %-18s %-22s %10s %12s %12s\n", "collective", "sizes", "algorithm",
              "modeled at", "time (us)", "busbw (GB/s)");
  for (int k = 0; k < static_cast<int>(CollKind::kSendRecv); ++k) {
    const auto kind = static_cast<CollKind>(k);
    for (const PlanRange& range : planner.ranges(kind)) {
      // A barrier has no size: its one row is modeled at 0 bytes.
      const size_t at = kind == CollKind::kBarrier ? 0 : planner.representative(range);
      const auto options = planner.ranked(kind, at);
      const double us = options.empty() ? 0 : options.front().us;
      const double busbw = us > 0 ? at / us / 1e3 * busFactor(kind, view.nranks) : 0;
      // Ranges meet at powers of two: (previous end, end].
      std::string sizes = range.fromBytes == 0 ? "0" : ">";
      if (range.fromBytes > 0) sizes += sizeText(range.fromBytes - 1);
      if (range.toBytes != Planner::kPlanMaxBytes)
        sizes += ".." + sizeText(range.toBytes);
      else if (range.fromBytes == 0)
        sizes = "all";
      std::printf("%-14s %-18s %-22s %10s %12.1f %12.2f\n", collName(kind), sizes.c_str(),
                  choiceName(range.algo, range.slices).c_str(), sizeText(at).c_str(), us, busbw);
    }
  }
  if (verbose)
    for (const std::string& line : planner.planDetails()) std::printf("  %s\n", line.c_str());
  std::printf("TRNCCL_ALGO: %s\n", planner.planTable().c_str());
  return 0;
}

int main(int argc, char** argv) {
  std::string file, presetName, dumpPath, statsDir, costsKind, tuningPath;
  int nodes = 1, ranksPerNode = 0, cores = 0;
  bool plan = false, verbose = false;
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
    } else if (arg == "--plan") {
      plan = true;
    } else if (arg == "--verbose") {
      verbose = true;
    } else if (arg == "--costs") {
      costsKind = value();
      if (costsKind != "hardware" && costsKind != "machine") {
        std::fprintf(stderr, "trnccl-topo: --costs takes hardware or machine\n");
        return 2;
      }
    } else if (arg == "--tuning") {
      tuningPath = value();
    } else if (arg == "--cores") {
      cores = std::atoi(value().c_str());
    } else {
      std::fprintf(stderr, "trnccl-topo: unknown argument '%s'\n%s", arg.c_str(), kUsage);
      return 2;
    }
  }
  if (!statsDir.empty()) return stats(statsDir);
  if (nodes < 1 || nodes > 65536 || ranksPerNode < 0 || cores < 0) {
    std::fprintf(stderr,
                 "trnccl-topo: --nodes must be 1-65536, --ranks-per-node and --cores >= 0\n");
    return 2;
  }
  const bool coresGiven = cores != 0;
  if (cores == 0) cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
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
  if (!plan) return 0;
  if (costsKind.empty()) costsKind = graph.empty() ? "machine" : "hardware";
  if (costsKind == "hardware" && graph.empty()) {
    std::fprintf(stderr, "trnccl-topo: --costs hardware needs chips (a preset, a file or sysfs)\n");
    return 2;
  }
  // A job plans with the tuning file in TRNCCL_TUNING_FILE; --tuning stands in for it.
  if (tuningPath.empty()) tuningPath = env::getString(env::kTuningFile);
  topology::Discovery costsFrom;  // hardware figures as for a device graph from the driver
  costsFrom.kind = costsKind == "hardware" ? topology::Discovery::Kind::kSysfs
                                           : topology::Discovery::Kind::kNone;
  costsFrom.graph = graph;
  auto costs = loadCosts(costsFrom, tuningPath);
  if (!costs.isOk()) {
    std::fprintf(stderr, "trnccl-topo: %s\n", costs.status().message().c_str());
    return 1;
  }
  return printPlan(topo.value(), costs.value(), verbose, costsKind == "machine",
                   static_cast<unsigned>(cores), coresGiven);
}
