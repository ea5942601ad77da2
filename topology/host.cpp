#include "topology/host.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "core/env.hpp"

namespace trnccl::topology {

static uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ULL;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  return hash;
}

HostIdentity localHostIdentity() {
  HostIdentity identity;
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  identity.name = name;
  // Two containers may share a hostname on different machines; the boot id tells them apart.
  std::string bootId;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, bootId);
  const std::string machine = identity.name + "/" + bootId;
  identity.id = env::isSet(env::kHostId) ? env::getString(env::kHostId) : machine;
  identity.hash = fnv1a(identity.id);
  // Without a boot id (no /proc) the host name has to stand for the kernel.
  const std::string kernel = bootId.empty() ? machine : bootId;
  identity.kernelHash = fnv1a(kernel);
  // A pid means the same process to two ranks when they share the pid namespace; without
  // its link, the host name stands for it (containers with their own names usually have
  // their own pid namespaces too).
  std::error_code error;
  const auto pidNamespace = std::filesystem::read_symlink("/proc/self/ns/pid", error);
  identity.machineHash =
      fnv1a(kernel + "/" + (error ? "host:" + identity.name : pidNamespace.string()));
  return identity;
}

int JobLayout::localRank(int rank) const {
  const auto& ranks = ranksOfNode[nodeOfRank[rank]];
  return static_cast<int>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
}

JobLayout groupByHost(const std::vector<uint64_t>& hostHashOfRank) {
  JobLayout layout;
  std::unordered_map<uint64_t, int> nodeOfHash;
  layout.nodeOfRank.resize(hostHashOfRank.size());
  for (size_t r = 0; r < hostHashOfRank.size(); ++r) {
    auto [it, inserted] = nodeOfHash.emplace(hostHashOfRank[r], layout.nnodes);
    if (inserted) {
      ++layout.nnodes;
      layout.ranksOfNode.emplace_back();
    }
    layout.nodeOfRank[r] = it->second;
    layout.ranksOfNode[it->second].push_back(static_cast<int>(r));
  }
  return layout;
}

}  // namespace trnccl::topology
