// Host identity (which ranks share a node) and the job's node layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trnccl::topology {

struct HostIdentity {
  std::string id;     // TRNCCL_HOSTID, or hostname + boot id
  std::string name;   // hostname, for messages
  uint64_t hash = 0;  // what ranks compare
  // Whatever TRNCCL_HOSTID says: ranks with equal values share a kernel and a pid namespace
  // (boot id + the namespace's inode), so one can watch the other's pid.
  uint64_t machineHash = 0;
  // The kernel alone (boot id): ranks with equal values share the cores, also from containers
  // with their own host names or pid namespaces (emulated nodes, pods on one machine).
  uint64_t kernelHash = 0;
};

HostIdentity localHostIdentity();

// Ranks grouped by host hash, in order of first appearance.
struct JobLayout {
  int nnodes = 0;
  std::vector<int> nodeOfRank;                // rank -> node index
  std::vector<std::vector<int>> ranksOfNode;  // node -> ranks, ascending
  int localRank(int rank) const;
  int localSize(int rank) const { return static_cast<int>(ranksOfNode[nodeOfRank[rank]].size()); }
};

JobLayout groupByHost(const std::vector<uint64_t>& hostHashOfRank);

}  // namespace trnccl::topology
