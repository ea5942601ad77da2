// The efa transport: messages between ranks over libfabric RDM endpoints (EFA on AWS; tcp;ofi_rxm
// or shm here). A message is cut into fragments that are striped over the rails and matched by
// tag (sender rank, per-pair message sequence, fragment index), so messages between a pair
// arrive in order whatever the provider does. Fragments of a receive that reduces land in
// registered staging buffers; plain receives land in place. Posting stops at a bounded number
// of outstanding operations per rail, and FI_EAGAIN is treated as "try again on the next
// progress pass". Nothing here blocks: the progress engine polls, and owns every timeout.
#pragma once

#include <list>
#include <memory>
#include <string>
#include <vector>

#include "transports/efa/fabric.hpp"
#include "transports/efa/mr_cache.hpp"
#include "transports/transport.hpp"

namespace trnccl::efa {

struct Message;
struct FragmentContext;

class EfaTransport : public Transport {
 public:
  // Opens the rails (endpoints) before the bootstrap exchange; provider and rails as in
  // TRNCCL_FI_PROVIDER / TRNCCL_EFA_RAILS (0 = one per NIC the provider offers).
  static Result<std::unique_ptr<EfaTransport>> open(int myRank, int nranks,
                                                    const std::string& provider, int rails);
  ~EfaTransport() override;

  const char* name() const override { return "efa"; }
  // This rank's rail addresses, to publish through the bootstrap.
  std::string addressBlob() const;
  // Peers' blobs by rank; empty for ranks this transport will not talk to.
  Status connect(const std::vector<std::string>& blobs);
  Result<bool> progressSend(TransferOp& op) override;
  Result<bool> progressRecv(TransferOp& op) override;

  // After a failure of the communicator: closes the endpoints, which cancels every posted
  // operation, so that no receive can land in a user buffer the caller frees after the error.
  // Later progress calls fail.
  void shutdown();
  // Before a normal destroy: progresses until posted sends completed (at most `seconds`), so
  // the last messages of the job leave this process before its endpoints close.
  void drain(double seconds);
  // One pass over the completion queues while no efa step is running (manual-progress
  // providers move queued data only when called); errors surface on the next efa step.
  void progressIdle() {
    if (!shutDown_) (void)pollCompletions();
  }

  // "provider tcp;ofi_rxm, fabric 127.0.0.1/32, domain lo, 2 rail(s), MR mode ..., rma".
  std::string describe() const;
  size_t registrations() const;
  size_t registrationHits() const;
  // Fragments posted on each rail so far (striping is visible in tests and logs).
  const std::vector<size_t>& fragmentsPerRail() const { return fragmentsPerRail_; }

 private:
  EfaTransport(int myRank, int nranks);
  Status pollCompletions();
  Result<Message*> start(TransferOp& op, bool send);
  Result<bool> postFragments(Message& m, TransferOp& op);
  Result<bool> finish(Message& m, TransferOp& op);
  void drop(Message* m, TransferOp& op);
  char* takeStaging(size_t bytes);
  void returnStaging(char* buffer, size_t bytes);

  int myRank_;
  int nranks_;
  ProviderChoice choice_;
  std::vector<std::unique_ptr<Rail>> rails_;
  std::vector<std::unique_ptr<MrCache>> caches_;       // one per rail (per domain)
  std::vector<size_t> sendsInFlight_, recvsInFlight_;  // posted, not completed, per rail
  std::vector<size_t> fragmentsPerRail_;
  std::vector<std::vector<fi_addr_t>> addrOf_;  // [rail][rank]
  std::vector<int> pairRails_;                  // rails shared with each peer
  std::vector<uint32_t> sendSeq_, recvSeq_;     // per peer
  bool shutDown_ = false;
  std::list<std::unique_ptr<Message>> messages_;  // live messages (providers hold contexts)
  std::vector<std::pair<size_t, std::unique_ptr<char[]>>> staging_;  // free buffers
};

}  // namespace trnccl::efa
