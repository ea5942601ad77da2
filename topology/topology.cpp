#include "topology/topology.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "core/env.hpp"
#include "core/log.hpp"
#include "core/text_file.hpp"
#include "topology/neuron_sysfs.hpp"
#include "topology/nic_locality.hpp"
#include "topology/presets.hpp"

namespace trnccl::topology {

const char* linkClassName(LinkClass c) {
  switch (c) {
    case LinkClass::kSelf: return "self";
    case LinkClass::kNeuronLink: return "neuronlink";
    case LinkClass::kShm: return "shm";
    case LinkClass::kEfa: return "efa";
  }
  return "?";
}

const char* discoveryKindName(Discovery::Kind kind) {
  switch (kind) {
    case Discovery::Kind::kFile: return "file";
    case Discovery::Kind::kPreset: return "preset";
    case Discovery::Kind::kSysfs: return "sysfs";
    case Discovery::Kind::kNone: return "none";
  }
  return "?";
}

Result<TransportSet> parseTransportList(const std::string& text) {
  TransportSet set;
  if (text.empty()) return set;
  set.neuronlink = set.shm = set.efa = false;
  std::istringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    if (item == "neuronlink")
      set.neuronlink = true;
    else if (item == "shm")
      set.shm = true;
    else if (item == "efa")
      set.efa = true;
    else if (item != "self" && !item.empty())
      return makeError(Code::kInvalidArgument,
                       "TRNCCL_TRANSPORT='%s': unknown transport '%s' (known: self, neuronlink, "
                       "shm, efa)",
                       text.c_str(), item.c_str());
  }
  return set;
}

Result<Discovery> discoverDevices(bool withHostNics) {
  Discovery found;
  if (std::string path = env::getString(env::kTopoFile); !path.empty()) {
    auto text = readTextFile(path);
    if (!text.isOk())
      return makeError(Code::kInvalidArgument,
                       "TRNCCL_TOPO_FILE: %s; point it at a topology file (docs/TOPOLOGY.md) or "
                       "unset it",
                       text.status().message().c_str());
    found.source = "TRNCCL_TOPO_FILE=" + path;
    auto graph = parseText(text.value(), found.source);
    TRNCCL_RETURN_IF_ERROR(graph.status());
    found.kind = Discovery::Kind::kFile;
    found.graph = std::move(graph.value());
    return found;
  }
  if (std::string name = env::getString(env::kTopoPreset); !name.empty()) {
    auto graph = preset(name);
    TRNCCL_RETURN_IF_ERROR(graph.status());
    found.kind = Discovery::Kind::kPreset;
    found.source = "TRNCCL_TOPO_PRESET=" + name;
    found.graph = std::move(graph.value());
    return found;
  }
  const std::string root = env::getString(env::kNeuronSysfs);
  auto graph = readNeuronSysfs(root);
  if (!graph.isOk()) {
    // Nobody asked for this topology: a driver tree trnccl cannot read costs the NeuronLink
    // emulation, not the job.
    TRNCCL_WARN(log::kTopo, "ignoring the Neuron driver's sysfs (%s): %s", root.c_str(),
                graph.status().message().c_str());
    graph = DeviceGraph{};
  }
  if (!graph.value().empty()) {
    found.kind = Discovery::Kind::kSysfs;
    found.source = "the Neuron driver's sysfs (" + root + ")";
    found.graph = std::move(graph.value());
  } else {
    found.source =
        "none (no TRNCCL_TOPO_FILE or TRNCCL_TOPO_PRESET, no Neuron devices in " + root + ")";
  }
  // This host's NICs and their NUMA nodes, from hwloc (TRNCCL_TOPO_XML stands in for it).
  // A host hwloc cannot read still has a topology: the NICs are left out, with a note.
  if (!withHostNics) return found;
  auto host = HostTopology::load(env::getString(env::kTopoXml));
  if (host.isOk())
    found.graph.nics = host.value()->listNics();
  else
    TRNCCL_INFO(log::kTopo, "no NICs in the topology: %s", host.status().message().c_str());
  found.graph.normalize();
  return found;
}

Result<int> chipOfLocalRank(const Discovery& found, int descNode, int localRank, int localSize,
                            const std::string& hostName) {
  if (found.graph.empty()) return -1;
  std::vector<int> chips;
  for (const Device& d : found.graph.devices)
    if (d.node == descNode) chips.push_back(d.id);
  const std::string list = env::getString(env::kNeuronDevices);
  if (list.empty()) {
    if (localSize > static_cast<int>(chips.size()))
      return makeError(Code::kInvalidUsage,
                       "%s describes %zu Neuron chip(s) per node, but host '%s' has %d local "
                       "ranks and each rank drives one chip: run at most %zu ranks per node, "
                       "or change %s (unset it for a host-only topology)",
                       found.source.c_str(), chips.size(), hostName.c_str(), localSize,
                       chips.size(),
                       found.kind == Discovery::Kind::kFile     ? "TRNCCL_TOPO_FILE"
                       : found.kind == Discovery::Kind::kPreset ? "TRNCCL_TOPO_PRESET"
                                                                : "TRNCCL_TOPO_FILE");
    return chips[localRank];
  }
  std::vector<int> listed;
  std::istringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    char* end = nullptr;
    long chip = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || std::find(chips.begin(), chips.end(), chip) == chips.end())
      return makeError(Code::kInvalidArgument,
                       "TRNCCL_NEURON_DEVICES='%s': '%s' is not a chip of %s (it has chips 0-%d)",
                       list.c_str(), item.c_str(), found.source.c_str(),
                       chips.empty() ? -1 : chips.back());
    if (std::find(listed.begin(), listed.end(), chip) != listed.end())
      return makeError(Code::kInvalidArgument, "TRNCCL_NEURON_DEVICES='%s' names chip %ld twice",
                       list.c_str(), chip);
    listed.push_back(static_cast<int>(chip));
  }
  if (localSize > static_cast<int>(listed.size()))
    return makeError(Code::kInvalidUsage,
                     "TRNCCL_NEURON_DEVICES='%s' lists %zu chip(s), but host '%s' has %d local "
                     "ranks and each rank drives one chip: list one chip per local rank",
                     list.c_str(), listed.size(), hostName.c_str(), localSize);
  return listed[localRank];
}

Result<Topology> Topology::build(JobLayout layout, Discovery found, std::vector<int> chipOfRank) {
  Topology t;
  t.layout_ = std::move(layout);
  t.found_ = std::move(found);
  t.chipOfRank_ = std::move(chipOfRank);
  const int n = static_cast<int>(t.layout_.nodeOfRank.size());
  if (static_cast<int>(t.chipOfRank_.size()) != n)
    return makeError(Code::kInternalError, "topology: %zu chip entries for %d ranks",
                     t.chipOfRank_.size(), n);
  t.localRankOf_.assign(n, -1);
  for (const auto& ranks : t.layout_.ranksOfNode)
    for (size_t i = 0; i < ranks.size(); ++i) t.localRankOf_[ranks[i]] = static_cast<int>(i);
  for (int node = 0; node < t.layout_.nnodes; ++node) {
    std::map<int, int> owner;  // chip -> rank
    for (int r : t.layout_.ranksOfNode[node]) {
      int chip = t.chipOfRank_[r];
      if (chip < 0) {
        if (t.hasDevices())
          return makeError(Code::kInvalidUsage,
                           "rank %d drives no Neuron chip although %s describes some; every "
                           "rank must discover the same topology (same TRNCCL_TOPO_FILE / "
                           "TRNCCL_TOPO_PRESET everywhere)",
                           r, t.found_.source.c_str());
        continue;
      }
      if (!t.hasDevices() || !t.devices().device(t.descNode(node), chip))
        return makeError(Code::kInvalidUsage,
                         "rank %d says it drives Neuron chip %d, which this rank's topology (%s) "
                         "does not have; every rank must discover the same topology",
                         r, chip, t.found_.source.c_str());
      if (auto [it, fresh] = owner.emplace(chip, r); !fresh)
        return makeError(Code::kInvalidUsage,
                         "ranks %d and %d of one node both drive Neuron chip %d; give each local "
                         "rank its own chip (TRNCCL_NEURON_DEVICES)",
                         it->second, r, chip);
    }
  }
  // Searched once here: the ring order and the hierarchical shapes both read it.
  for (int node = 0; node < t.layout_.nnodes; ++node)
    t.linkOrders_.push_back(t.searchLinkOrder(node));
  return t;
}

std::vector<int> Topology::localIndexFrom(int rank) const {
  std::vector<int> result(nranks(), -1);
  for (int r : ranksOfNode(nodeOf(rank))) result[r] = localRankOf_[r];
  return result;
}

const DeviceLink* Topology::linkBetween(int a, int b) const {
  if (!hasDevices() || chipOfRank_[a] < 0 || chipOfRank_[b] < 0) return nullptr;
  const int nodesPer = found_.graph.nodes;
  const int na = nodeOf(a), nb = nodeOf(b);
  if (na / nodesPer != nb / nodesPer) return nullptr;  // different UltraServers
  return found_.graph.link(descNode(na), chipOfRank_[a], descNode(nb), chipOfRank_[b]);
}

Result<LinkClass> Topology::classBetween(int a, int b, const TransportSet& allowed) const {
  if (a == b) return LinkClass::kSelf;
  const bool sameNode = nodeOf(a) == nodeOf(b);
  if (sameNode && allowed.neuronlink && linkBetween(a, b)) return LinkClass::kNeuronLink;
  if (sameNode && allowed.shm) return LinkClass::kShm;
  if (allowed.efa) return LinkClass::kEfa;
  return makeError(Code::kInvalidUsage,
                   "TRNCCL_TRANSPORT leaves no transport from rank %d to rank %d (%s node%s); "
                   "allow shm (or neuronlink between linked chips) inside a node and efa "
                   "between nodes",
                   a, b, sameNode ? "same" : "other",
                   sameNode && linkBetween(a, b) ? ", linked chips" : "");
}

namespace {

// Depth-first search for a Hamiltonian cycle (or, failing that, path) over n vertices, bounded
// so that an unlucky graph costs milliseconds, not minutes; torus graphs find one at once.
class HamiltonSearch {
 public:
  explicit HamiltonSearch(const std::vector<std::vector<char>>& adjacent)
      : adj_(adjacent), n_(static_cast<int>(adjacent.size())), used_(n_, 0) {}
  // A cycle may start anywhere; a path is tried from every vertex (a leaf must be an end).
  std::vector<int> find(bool cycle) {
    budget_ = 200000;
    for (int start = 0; start < (cycle ? 1 : n_) && budget_ > 0; ++start) {
      path_.assign(1, start);
      used_.assign(n_, 0);
      used_[start] = 1;
      if (extend(cycle)) return path_;
    }
    return {};
  }

 private:
  bool extend(bool cycle) {
    if (--budget_ < 0) return false;
    if (static_cast<int>(path_.size()) == n_) return !cycle || adj_[path_.back()][path_.front()];
    for (int v = 0; v < n_; ++v) {
      if (used_[v] || !adj_[path_.back()][v]) continue;
      used_[v] = 1;
      path_.push_back(v);
      if (extend(cycle)) return true;
      path_.pop_back();
      used_[v] = 0;
    }
    return false;
  }
  const std::vector<std::vector<char>>& adj_;
  int n_;
  std::vector<char> used_;
  std::vector<int> path_;
  long budget_ = 0;
};

}  // namespace

std::vector<int> Topology::searchLinkOrder(int node) const {
  const std::vector<int>& ranks = ranksOfNode(node);
  const int m = static_cast<int>(ranks.size());
  if (!hasDevices() || m < 3) return ranks;
  std::vector<std::vector<char>> adjacent(m, std::vector<char>(m, 0));
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < m; ++j) adjacent[i][j] = i != j && linkBetween(ranks[i], ranks[j]);
  HamiltonSearch search(adjacent);
  std::vector<int> order = search.find(true);
  if (order.empty()) order = search.find(false);
  if (order.empty()) return ranks;
  std::vector<int> result;
  for (int i : order) result.push_back(ranks[i]);
  return result;
}

std::vector<int> Topology::ringOrder() const {
  std::vector<int> order;
  for (int node = 0; node < nnodes(); ++node) {
    const std::vector<int>& inNode = linkOrder(node);
    order.insert(order.end(), inNode.begin(), inNode.end());
  }
  return order;
}

std::string Topology::describe() const {
  std::string out =
      strformat("topology: %s\n  %d rank(s) on %d node(s); devices: %s\n", found_.source.c_str(),
                nranks(), nnodes(), found_.graph.shape().c_str());
  if (!found_.graph.instance.empty()) out += "  instance: " + found_.graph.instance + "\n";
  for (int node = 0; node < nnodes(); ++node) {
    out += strformat("  node %d (description node %d): leader rank %d; ranks", node, descNode(node),
                     leader(node));
    for (int r : ranksOfNode(node)) {
      out += strformat(" %d", r);
      if (chipOf(r) >= 0) out += strformat("->chip%d", chipOf(r));
    }
    out += "\n";
  }
  for (int node = 0; node < found_.graph.nodes && hasDevices(); ++node) {
    for (const Device& d : found_.graph.devices) {
      if (d.node != node) continue;
      out += strformat("  chip %d:%d", d.node, d.id);
      if (!d.arch.empty()) out += " " + d.arch;
      if (d.cores > 0) out += strformat(" (%d cores)", d.cores);
      if (d.coord[0] >= 0) out += strformat(" at (%d,%d,%d)", d.coord[0], d.coord[1], d.coord[2]);
      out += " links:";
      for (const DeviceLink& l : found_.graph.links) {
        if (l.nodeA == d.node && l.devA == d.id)
          out += strformat(" %d:%d", l.nodeB, l.devB);
        else if (l.nodeB == d.node && l.devB == d.id)
          out += strformat(" %d:%d", l.nodeA, l.devA);
      }
      out += "\n";
    }
  }
  for (const Nic& nic : found_.graph.nics) {
    out += strformat("  nic %d:%s", nic.node, nic.name.c_str());
    if (nic.numa >= 0) out += strformat(" numa %d", nic.numa);
    if (nic.gbps > 0) out += strformat(" %g Gbit/s", nic.gbps);
    out += "\n";
  }
  return out;
}

}  // namespace trnccl::topology
