#include "topology/neuron_sysfs.hpp"

#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "core/log.hpp"

namespace trnccl::topology {
namespace {

bool readFirstLine(const std::string& path, std::string* line) {
  std::ifstream in(path);
  if (!in) return false;
  std::getline(in, *line);
  while (!line->empty() && std::isspace(static_cast<unsigned char>(line->back()))) line->pop_back();
  return true;
}

std::string lowered(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// NeuronLink generation and per-link bandwidth by chip (presets.cpp has the sources).
void linkClassOf(const std::string& arch, std::string* kind, double* gbps) {
  if (arch.find("trainium2") != std::string::npos) {
    *kind = "neuronlink-v3";
    *gbps = 256;
  } else {
    *kind = "neuronlink-v2";  // trainium1, inferentia2; unknown chips get the older class
    *gbps = 96;
  }
}

}  // namespace

Result<DeviceGraph> readNeuronSysfs(const std::string& root) {
  DeviceGraph g;
  DIR* dir = opendir(root.c_str());
  if (!dir) return g;
  std::vector<int> ids;
  while (dirent* entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (name.rfind("neuron", 0) != 0 || name.size() == 6) continue;
    std::string digits = name.substr(6);
    // Not a chip directory unless neuron<number>, and chip numbers stay below 4096.
    if (digits.size() > 4 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return std::isdigit(c); }))
      continue;
    if (const int id = std::atoi(digits.c_str()); id < 4096) ids.push_back(id);
  }
  closedir(dir);
  std::sort(ids.begin(), ids.end());
  std::set<int> present(ids.begin(), ids.end());
  std::set<std::pair<int, int>> edges;
  for (int id : ids) {
    const std::string base = strformat("%s/neuron%d", root.c_str(), id);
    Device d;
    d.id = id;
    std::string text;
    // The driver calls the first chip "Trainium"; trnccl names generations explicitly.
    if (readFirstLine(base + "/info/architecture/device_name", &text))
      d.arch = lowered(text) == "trainium" ? "trainium1" : lowered(text);
    if (readFirstLine(base + "/info/architecture/instance_type", &text) && g.instance.empty())
      g.instance = text;
    if (readFirstLine(base + "/core_count", &text)) {
      char* end = nullptr;
      long cores = std::strtol(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || cores < 1 || cores > 1024)
        return makeError(Code::kSystemError, "%s/core_count: '%s' is not a core count",
                         base.c_str(), text.c_str());
      d.cores = static_cast<int>(cores);
    }
    g.devices.push_back(d);
    if (!readFirstLine(base + "/connected_devices", &text)) continue;  // a chip with no links
    for (char& c : text)
      if (c == ',') c = ' ';
    std::istringstream words(text);
    for (std::string word; words >> word;) {
      char* end = nullptr;
      long peer = std::strtol(word.c_str(), &end, 10);
      if (*end != '\0' || peer < 0 || peer > 4095)
        return makeError(Code::kSystemError,
                         "%s/connected_devices: '%s' is not a device number (expected a list "
                         "like '12, 3, 4, 1')",
                         base.c_str(), word.c_str());
      if (peer == id) continue;
      if (!present.count(static_cast<int>(peer))) {
        TRNCCL_INFO(log::kTopo,
                    "%s/connected_devices names neuron%ld, which is not in %s; "
                    "that link is left out",
                    base.c_str(), peer, root.c_str());
        continue;
      }
      // The driver lists a link on both chips; one listing is enough to count it.
      edges.insert(
          {std::min<int>(id, static_cast<int>(peer)), std::max<int>(id, static_cast<int>(peer))});
    }
  }
  for (const auto& [a, b] : edges) {
    DeviceLink l;
    l.devA = a;
    l.devB = b;
    linkClassOf(g.device(0, a) ? g.device(0, a)->arch : "", &l.kind, &l.bandwidthGBps);
    g.links.push_back(l);
  }
  g.normalize();
  recogniseTorus(g);
  return g;
}

}  // namespace trnccl::topology
