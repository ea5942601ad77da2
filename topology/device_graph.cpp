#include "topology/device_graph.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

namespace trnccl::topology {

int DeviceGraph::devicesOnNode(int node) const {
  return static_cast<int>(std::count_if(devices.begin(), devices.end(),
                                        [&](const Device& d) { return d.node == node; }));
}

const Device* DeviceGraph::device(int node, int id) const {
  for (const Device& d : devices)
    if (d.node == node && d.id == id) return &d;
  return nullptr;
}

const DeviceLink* DeviceGraph::link(int nodeA, int devA, int nodeB, int devB) const {
  if (std::tie(nodeB, devB) < std::tie(nodeA, devA)) {
    std::swap(nodeA, nodeB);
    std::swap(devA, devB);
  }
  for (const DeviceLink& l : links)
    if (l.nodeA == nodeA && l.devA == devA && l.nodeB == nodeB && l.devB == devB) return &l;
  return nullptr;
}

std::vector<int> DeviceGraph::neighbours(int node, int id) const {
  std::vector<int> result;
  for (const DeviceLink& l : links) {
    if (l.nodeA != node || l.nodeB != node) continue;
    if (l.devA == id) result.push_back(l.devB);
    if (l.devB == id) result.push_back(l.devA);
  }
  std::sort(result.begin(), result.end());
  return result;
}

void DeviceGraph::normalize() {
  for (DeviceLink& l : links)
    if (std::tie(l.nodeB, l.devB) < std::tie(l.nodeA, l.devA)) {
      std::swap(l.nodeA, l.nodeB);
      std::swap(l.devA, l.devB);
    }
  std::sort(devices.begin(), devices.end(), [](const Device& a, const Device& b) {
    return std::tie(a.node, a.id) < std::tie(b.node, b.id);
  });
  std::sort(links.begin(), links.end(), [](const DeviceLink& a, const DeviceLink& b) {
    return std::tie(a.nodeA, a.devA, a.nodeB, a.devB) < std::tie(b.nodeA, b.devA, b.nodeB, b.devB);
  });
  std::sort(nics.begin(), nics.end(), [](const Nic& a, const Nic& b) {
    return std::tie(a.node, a.name) < std::tie(b.node, b.name);
  });
}

std::string DeviceGraph::shape() const {
  if (devices.empty()) return "no Neuron devices";
  std::set<std::string> arches, kinds;
  std::set<double> widths;
  for (const Device& d : devices) arches.insert(d.arch.empty() ? "unknown" : d.arch);
  for (const DeviceLink& l : links) {
    kinds.insert(l.kind);
    widths.insert(l.bandwidthGBps);
  }
  auto join = [](const auto& set, auto format) {
    std::string text;
    for (const auto& v : set) {
      if (!text.empty()) text += "/";
      text += format(v);
    }
    return text;
  };
  std::string text = strformat("%zu chip(s) (%s)", devices.size(),
                               join(arches, [](const std::string& s) { return s; }).c_str());
  if (nodes > 1) text += strformat(" on %d nodes", nodes);
  if (torus[0] > 0) {
    text += torus[2] > 1 ? strformat(" in a %dx%dx%d torus", torus[0], torus[1], torus[2])
                         : strformat(" in a %dx%d torus", torus[0], torus[1]);
  }
  text += strformat(", %zu NeuronLink(s)", links.size());
  if (!links.empty())
    text += strformat(" (%s; %s GB/s)", join(kinds, [](const std::string& s) { return s; }).c_str(),
                      join(widths, [](double v) { return strformat("%g", v); }).c_str());
  if (!nics.empty()) text += strformat(", %zu NIC(s)", nics.size());
  return text;
}

namespace {

// Shortest text that reads back as exactly the same double.
std::string number(double value) {
  std::string text = strformat("%.15g", value);
  if (std::strtod(text.c_str(), nullptr) != value) text = strformat("%.17g", value);
  return text;
}

}  // namespace

std::string toText(const DeviceGraph& input) {
  DeviceGraph g = input;
  g.normalize();
  std::string out = "trnccl-topology 1\n";
  if (!g.instance.empty()) out += "instance " + g.instance + "\n";
  out += strformat("nodes %d\n", g.nodes);
  if (g.torus[0] > 0) out += strformat("torus %d %d %d\n", g.torus[0], g.torus[1], g.torus[2]);
  for (const Device& d : g.devices) {
    out += strformat("device %d:%d", d.node, d.id);
    if (!d.arch.empty()) out += " arch=" + d.arch;
    if (d.cores > 0) out += strformat(" cores=%d", d.cores);
    if (d.coord[0] >= 0) out += strformat(" coord=%d,%d,%d", d.coord[0], d.coord[1], d.coord[2]);
    out += "\n";
  }
  for (const DeviceLink& l : g.links)
    out += strformat("link %d:%d %d:%d kind=%s bw=%s\n", l.nodeA, l.devA, l.nodeB, l.devB,
                     l.kind.c_str(), number(l.bandwidthGBps).c_str());
  for (const Nic& n : g.nics) {
    out += strformat("nic %d name=%s", n.node, n.name.c_str());
    if (n.numa >= 0) out += strformat(" numa=%d", n.numa);
    if (n.gbps > 0) out += " gbps=" + number(n.gbps);
    out += "\n";
  }
  return out;
}

namespace {

// One line being parsed: every error names the origin, the line and the field.
class LineParser {
 public:
  LineParser(const std::string& origin, int line, std::vector<std::string> words)
      : origin_(origin), line_(line), words_(std::move(words)) {}

  Status error(const std::string& field, const std::string& what) const {
    return makeError(Code::kInvalidArgument, "%s line %d, field '%s': %s", origin_.c_str(), line_,
                     field.c_str(), what.c_str());
  }
  size_t size() const { return words_.size(); }
  const std::string& word(size_t i) const { return words_[i]; }

  Result<long> integer(const std::string& field, const std::string& text, long low,
                       long high) const {
    char* end = nullptr;
    errno = 0;
    long value = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0)
      return error(field, "'" + text + "' is not an integer");
    if (value < low || value > high)
      return error(field, strformat("%ld is outside [%ld, %ld]", value, low, high));
    return value;
  }
  Result<double> positive(const std::string& field, const std::string& text) const {
    char* end = nullptr;
    double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(value > 0) || value > 1e12)
      return error(field, "'" + text + "' is not a positive number");
    return value;
  }
  // "node:device" with node < nodes.
  Result<std::pair<int, int>> chipRef(const std::string& field, const std::string& text,
                                      int nodes) const {
    size_t colon = text.find(':');
    if (colon == std::string::npos)
      return error(field, "'" + text + "' is not NODE:DEVICE (e.g. 0:3)");
    auto node = integer(field, text.substr(0, colon), 0, nodes - 1);
    TRNCCL_RETURN_IF_ERROR(node.status());
    auto dev = integer(field, text.substr(colon + 1), 0, 4095);
    TRNCCL_RETURN_IF_ERROR(dev.status());
    return std::make_pair(static_cast<int>(node.value()), static_cast<int>(dev.value()));
  }
  // key=value fields from word `first` on; every key must be in `known`, each at most once.
  Result<std::map<std::string, std::string>> fields(size_t first,
                                                    const std::set<std::string>& known) const {
    std::map<std::string, std::string> result;
    for (size_t i = first; i < words_.size(); ++i) {
      size_t eq = words_[i].find('=');
      if (eq == std::string::npos || eq == 0) return error(words_[i], "expected KEY=VALUE");
      std::string key = words_[i].substr(0, eq);
      if (!known.count(key)) {
        std::string list;
        for (const auto& k : known) {
          if (!list.empty()) list += ", ";
          list += k;
        }
        return error(key, "unknown field for '" + words_[0] + "' (known: " + list + ")");
      }
      if (!result.emplace(key, words_[i].substr(eq + 1)).second) return error(key, "given twice");
    }
    return result;
  }

 private:
  const std::string& origin_;
  int line_;
  std::vector<std::string> words_;
};

}  // namespace

Result<DeviceGraph> parseText(const std::string& text, const std::string& origin) {
  DeviceGraph g;
  std::istringstream in(text);
  std::string raw;
  int lineNo = 0;
  bool sawHeader = false, sawDevice = false, sawNodes = false;
  std::set<std::pair<int, int>> declared;
  std::set<std::tuple<int, int, int, int>> linked;
  while (std::getline(in, raw)) {
    ++lineNo;
    if (size_t hash = raw.find('#'); hash != std::string::npos) raw.resize(hash);
    std::istringstream words(raw);
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    if (w.empty()) continue;
    LineParser p(origin, lineNo, w);
    const std::string& keyword = w[0];
    if (!sawHeader) {
      if (keyword != "trnccl-topology" || w.size() != 2)
        return p.error(keyword, "the first line must be 'trnccl-topology 1'");
      if (w[1] != "1") return p.error("version", "version '" + w[1] + "' is not supported (1 is)");
      sawHeader = true;
      continue;
    }
    if (keyword == "instance") {
      if (w.size() != 2)
        return p.error("instance", "expected one name, e.g. 'instance trn2.48xlarge'");
      g.instance = w[1];
    } else if (keyword == "nodes") {
      if (w.size() != 2) return p.error("nodes", "expected one count");
      if (sawDevice || sawNodes) return p.error("nodes", "must come once, before any device");
      auto n = p.integer("nodes", w[1], 1, 64);
      TRNCCL_RETURN_IF_ERROR(n.status());
      g.nodes = static_cast<int>(n.value());
      sawNodes = true;
    } else if (keyword == "torus") {
      if (w.size() != 4) return p.error("torus", "expected X Y Z, e.g. 'torus 4 4 1'");
      for (int i = 0; i < 3; ++i) {
        auto v = p.integer(std::string("torus ") + "xyz"[i], w[i + 1], 1, 4096);
        TRNCCL_RETURN_IF_ERROR(v.status());
        g.torus[i] = static_cast<int>(v.value());
      }
    } else if (keyword == "device") {
      if (w.size() < 2) return p.error("device", "expected NODE:DEVICE");
      auto ref = p.chipRef("device", w[1], g.nodes);
      TRNCCL_RETURN_IF_ERROR(ref.status());
      if (!declared.insert(ref.value()).second)
        return p.error("device", "device " + w[1] + " is declared twice");
      auto f = p.fields(2, {"arch", "cores", "coord"});
      TRNCCL_RETURN_IF_ERROR(f.status());
      Device d;
      d.node = ref.value().first;
      d.id = ref.value().second;
      if (f.value().count("arch")) d.arch = f.value()["arch"];
      if (f.value().count("cores")) {
        auto c = p.integer("cores", f.value()["cores"], 1, 1024);
        TRNCCL_RETURN_IF_ERROR(c.status());
        d.cores = static_cast<int>(c.value());
      }
      if (f.value().count("coord")) {
        std::string coord = f.value()["coord"];
        std::istringstream parts(coord);
        std::string part;
        int i = 0;
        while (std::getline(parts, part, ',')) {
          if (i == 3) return p.error("coord", "'" + coord + "' has more than 3 values");
          auto v = p.integer("coord", part, 0, 4095);
          TRNCCL_RETURN_IF_ERROR(v.status());
          d.coord[i++] = static_cast<int>(v.value());
        }
        if (i != 3) return p.error("coord", "'" + coord + "' is not X,Y,Z");
      }
      g.devices.push_back(d);
      sawDevice = true;
    } else if (keyword == "link") {
      if (w.size() < 3) return p.error("link", "expected NODE:DEVICE NODE:DEVICE kind=... bw=...");
      auto a = p.chipRef("link", w[1], g.nodes);
      TRNCCL_RETURN_IF_ERROR(a.status());
      auto b = p.chipRef("link", w[2], g.nodes);
      TRNCCL_RETURN_IF_ERROR(b.status());
      for (const auto& [ref, word] :
           {std::make_pair(a.value(), w[1]), std::make_pair(b.value(), w[2])})
        if (!declared.count(ref))
          return p.error("link",
                         "device " + word + " is not declared (a 'device' line must come first)");
      if (a.value() == b.value())
        return p.error("link", "a chip cannot link to itself (" + w[1] + ")");
      auto f = p.fields(3, {"kind", "bw"});
      TRNCCL_RETURN_IF_ERROR(f.status());
      if (!f.value().count("kind")) return p.error("kind", "missing (e.g. kind=neuronlink-v3)");
      if (!f.value().count("bw")) return p.error("bw", "missing (GB/s per direction, e.g. bw=256)");
      auto bw = p.positive("bw", f.value()["bw"]);
      TRNCCL_RETURN_IF_ERROR(bw.status());
      DeviceLink l{a.value().first,  a.value().second,  b.value().first,
                   b.value().second, f.value()["kind"], bw.value()};
      if (std::tie(l.nodeB, l.devB) < std::tie(l.nodeA, l.devA)) {
        std::swap(l.nodeA, l.nodeB);
        std::swap(l.devA, l.devB);
      }
      if (!linked.insert({l.nodeA, l.devA, l.nodeB, l.devB}).second)
        return p.error("link", "the link " + w[1] + " - " + w[2] + " is given twice");
      g.links.push_back(l);
    } else if (keyword == "nic") {
      if (w.size() < 2) return p.error("nic", "expected NODE name=...");
      auto node = p.integer("nic", w[1], 0, g.nodes - 1);
      TRNCCL_RETURN_IF_ERROR(node.status());
      auto f = p.fields(2, {"name", "numa", "gbps"});
      TRNCCL_RETURN_IF_ERROR(f.status());
      if (!f.value().count("name")) return p.error("name", "missing");
      Nic n;
      n.node = static_cast<int>(node.value());
      n.name = f.value()["name"];
      if (f.value().count("numa")) {
        auto numa = p.integer("numa", f.value()["numa"], 0, 4095);
        TRNCCL_RETURN_IF_ERROR(numa.status());
        n.numa = static_cast<int>(numa.value());
      }
      if (f.value().count("gbps")) {
        auto gbps = p.positive("gbps", f.value()["gbps"]);
        TRNCCL_RETURN_IF_ERROR(gbps.status());
        n.gbps = gbps.value();
      }
      g.nics.push_back(n);
    } else {
      return p.error(keyword, "unknown keyword (known: instance, nodes, torus, device, link, nic)");
    }
  }
  if (!sawHeader)
    return makeError(Code::kInvalidArgument,
                     "%s: empty; the first line must be 'trnccl-topology 1'", origin.c_str());
  if (g.torus[0] > 0) {
    int perNode = g.devicesOnNode(0);
    if (g.torus[0] * g.torus[1] != perNode || g.torus[2] != g.nodes)
      return makeError(Code::kInvalidArgument,
                       "%s, field 'torus': %dx%dx%d does not match %d chip(s) per node on %d "
                       "node(s) (X*Y must be the chips per node, Z the nodes)",
                       origin.c_str(), g.torus[0], g.torus[1], g.torus[2], perNode, g.nodes);
    // Torus schedules place chip id = y * X + x, so the ids of every node must be 0..X*Y-1.
    for (const Device& d : g.devices)
      if (d.id >= perNode || g.devicesOnNode(d.node) != perNode)
        return makeError(Code::kInvalidArgument,
                         "%s, field 'torus': node %d does not number its chips 0-%d (it has chip "
                         "%d and %d chip(s)); a torus numbers chips row by row, id = y * %d + x",
                         origin.c_str(), d.node, perNode - 1, d.id, g.devicesOnNode(d.node),
                         g.torus[0]);
  }
  g.normalize();
  return g;
}

void addTorus(DeviceGraph& g, int x, int y, int z, const std::string& kind, double gbps,
              const std::string& zKind, double zGBps) {
  g.torus[0] = x;
  g.torus[1] = y;
  g.torus[2] = z;
  g.nodes = z;
  std::set<std::tuple<int, int, int, int>> seen;
  auto add = [&](int na, int da, int nb, int db, const std::string& k, double bw) {
    if (na == nb && da == db) return;  // a ring of one
    if (std::tie(nb, db) < std::tie(na, da)) {
      std::swap(na, nb);
      std::swap(da, db);
    }
    if (seen.insert({na, da, nb, db}).second) g.links.push_back({na, da, nb, db, k, bw});
  };
  for (int node = 0; node < z; ++node)
    for (int j = 0; j < y; ++j)
      for (int i = 0; i < x; ++i) {
        const int id = j * x + i;
        for (Device& d : g.devices)
          if (d.node == node && d.id == id) {
            d.coord[0] = i;
            d.coord[1] = j;
            d.coord[2] = node;
          }
        add(node, id, node, j * x + (i + 1) % x, kind, gbps);
        add(node, id, node, ((j + 1) % y) * x + i, kind, gbps);
        add(node, id, (node + 1) % z, id, zKind, zGBps);
      }
  g.normalize();
}

bool recogniseTorus(DeviceGraph& g) {
  if (g.nodes != 1 || g.devices.size() < 4 || g.links.empty()) return false;
  const int n = static_cast<int>(g.devices.size());
  for (int k = 0; k < n; ++k)
    if (g.devices[k].id != k) return false;  // ids must be 0..n-1
  for (int x = 2; x <= n / 2; ++x) {
    if (n % x != 0) continue;
    DeviceGraph candidate = g;
    candidate.links.clear();
    addTorus(candidate, x, n / x, 1, "", 0, "", 0);
    bool same = candidate.links.size() == g.links.size();
    for (size_t i = 0; same && i < g.links.size(); ++i) {
      const DeviceLink &a = candidate.links[i], &b = g.links[i];
      same = a.devA == b.devA && a.devB == b.devB;
    }
    if (!same) continue;
    for (int i = 0; i < 3; ++i) g.torus[i] = candidate.torus[i];
    g.devices = candidate.devices;
    return true;
  }
  return false;
}

}  // namespace trnccl::topology
