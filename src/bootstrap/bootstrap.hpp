// TCP rendezvous behind trncclUniqueId. trncclGetUniqueId starts a root thread in the calling
// process; every rank connects to it, sends a validated Hello with its PeerInfo, and receives
// the table of all ranks. Stray or malformed connections are dropped with a warning; a job
// whose ranks never all arrive gets a Timeout listing the missing ranks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "trnccl.h"

namespace trnccl::bootstrap {

// Everything a rank tells the others at init. Fixed size and trivially copyable: it is
// sent as bytes, so fields only ever get appended (bump kWireVersion when they do).
struct PeerInfo {
  uint64_t hostHash = 0;  // ranks with equal hashes share a node
  int32_t rank = -1;
  int32_t pid = 0;
  char hostName[64] = {};
  char hostId[64] = {};                // readable host identity (TRNCCL_HOSTID or hostname)
  uint8_t transportAddress[256] = {};  // reserved for network transports' endpoint names
  uint64_t machineHash = 0;            // HostIdentity::machineHash (wire version 2)
  uint64_t cmaProbeAddress = 0;        // a word local peers read to test CMA (version 3)
  uint64_t kernelHash = 0;             // HostIdentity::kernelHash (version 4)
};

struct UniqueIdData {
  uint32_t magic;
  uint32_t version;
  uint32_t ipv4;  // network byte order
  uint16_t port;
  uint16_t reserved;
  uint64_t nonce;  // names this job: shm segments, and rejects connections from other jobs
  // The process that made the id holds the rendezvous root: when the root stops answering,
  // ranks on its machine check whether that process is gone, and say which rank it was.
  int32_t rootPid;
  uint32_t reserved2;
  uint64_t rootMachineHash;
};
static_assert(sizeof(UniqueIdData) <= TRNCCL_UNIQUE_ID_BYTES);

Status createUniqueId(trncclUniqueId* id);
Result<UniqueIdData> parseUniqueId(const trncclUniqueId& id);

struct Joined;

// A rank's connection to the root after the table arrived, kept for one exchange round.
class Session {
 public:
  Session() = default;
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();
  // Every rank sends a blob (at most 64 KiB, may be empty) and receives everyone's, indexed by
  // rank. Called exactly once per rendezvous by every rank: the root waits for all of them.
  Result<std::vector<std::string>> exchange(const std::string& blob, double timeoutSeconds);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  friend Result<Joined> rendezvous(const trncclUniqueId&, int, int, const PeerInfo&, double);
};

struct Joined {
  std::vector<PeerInfo> table;  // indexed by rank
  Session session;
};

// Blocks until every rank joined or timeoutSeconds passed.
Result<Joined> rendezvous(const trncclUniqueId& id, int nranks, int rank, const PeerInfo& self,
                          double timeoutSeconds);

// Hex text form of a unique id, for passing through environment variables.
std::string uniqueIdToHex(const trncclUniqueId& id);
Result<trncclUniqueId> uniqueIdFromHex(const std::string& hex);

}  // namespace trnccl::bootstrap
