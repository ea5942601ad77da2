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
  // This machine (hostname + boot id), whatever TRNCCL_HOSTID says: ranks with equal values
  // share a kernel, so their pids can be watched and their cores are shared.
  uint64_t machineHash = 0;
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
