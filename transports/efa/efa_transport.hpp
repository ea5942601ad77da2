// The efa transport: messages between ranks over libfabric RDM endpoints (EFA on AWS; tcp;ofi_rxm
// or shm here). A message is cut into fragments that are striped over the rails and matched by
// tag (sender rank, per-pair message sequence, fragment index), so messages between a pair
// arrive in order whatever the provider does. Fragments of a receive that reduces land in
// registered staging buffers; plain receives land in place. Large messages go by rendezvous
// when the provider offers FI_RMA: the sender announces its registered buffer, the receiver
// pulls the fragments with fi_read (into place, or into staging) and says when it is done,
// which is when the sender's buffer is free again. Posting stops at a bounded number
// of outstanding operations per rail, and FI_EAGAIN is treated as "try again on the next
// progress pass". Nothing here blocks: the progress engine polls, and owns every timeout.
#pragma once

#include <algorithm>
#include <atomic>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transports/efa/fabric.hpp"
#include "transports/efa/message.hpp"
#include "transports/efa/mr_cache.hpp"
#include "transports/transport.hpp"

namespace trnccl::efa {

struct Message;
struct FragmentContext;

struct EfaOptions {
  std::string provider;  // TRNCCL_FI_PROVIDER ("" = efa, net, tcp;ofi_rxm, shm)
  int rails = 0;         // TRNCCL_EFA_RAILS (0 = one per NIC the provider offers)
  // TRNCCL_EFA_RNDV_BYTES: empty = the provider's default (defaultRendezvousBytes), 0 = eager.
  std::optional<size_t> rendezvousBytes;
  std::string topologyXml;  // TRNCCL_TOPO_XML ("" = discover this machine)
  // TRNCCL_EFA_MR_CACHE: whether registrations of user buffers are cached (mr_cache.hpp).
  enum class UserMrCache { kAuto, kOn, kOff };
  UserMrCache userMrCache = UserMrCache::kAuto;
  // Caps each rail's outstanding sends and receives below what the provider's queues allow
  // (0 = no cap): tests reach a full budget with a few messages instead of hundreds of MiB.
  size_t maxQueued = 0;
  // Completion queues with a wait descriptor, so that a rank blocked on a peer can sleep
  // (armSleep/sleep below). Set unless TRNCCL_EFA_SLEEP=0, when the wait policy sleeps at all
  // (TRNCCL_SPIN_TIME_US >= 0).
  bool waitObject = false;

  // The options as the TRNCCL_* variables above set them; a bad value is an error naming it.
  static Result<EfaOptions> fromEnvironment();
};

// The rendezvous threshold of a provider (fi_info's prov_name) when TRNCCL_EFA_RNDV_BYTES is
// auto: 0 (eager only) where RMA reads travel the same TCP stream as messages (net, tcp's own
// endpoints), 1 MiB elsewhere (efa, tcp;ofi_rxm, shm). See the variable's doc for why.
size_t defaultRendezvousBytes(const std::string& providerName);

// A user's registration of one buffer (trncclCommRegister): one entry per rail.
struct UserRegistration {
  std::vector<MrCache::Entry*> perRail;
};

class EfaTransport : public Transport {
 public:
  // Opens the rails (endpoints) before the bootstrap exchange.
  static Result<std::unique_ptr<EfaTransport>> open(int myRank, int nranks,
                                                    const EfaOptions& options);
  ~EfaTransport() override;

  const char* name() const override { return "efa"; }
  // This rank's rail addresses, to publish through the bootstrap.
  std::string addressBlob() const;
  // Peers' blobs by rank; empty for ranks this transport will not talk to.
  Status connect(const std::vector<std::string>& blobs);
  Result<bool> progressSend(TransferOp& op) override;
  Result<bool> progressRecv(TransferOp& op) override;

  // Closes the endpoints, which cancels every posted operation, so that no receive can land in
  // a user buffer the caller frees afterwards. Later progress calls fail.
  void shutdown();
  // After a failure of the communicator: sends every connected peer a failure notice (the rank
  // where the failure started and its sentence; best effort, at most kNoticeSeconds), then
  // stops like shutdown(). Over ofi_rxm the endpoints are instead left open and never
  // progressed again (nothing lands either: that provider moves data only when polled), and
  // the destructor hands them to a process-wide list that is never closed: closing one whose
  // peer reset its connections mid-transfer crashes inside libfabric 1.17 (ofi_rxm reads a
  // cancelled completion that has no context). docs/RELIABILITY.md.
  void fail(int originRank, const std::string& sentence);
  static constexpr double kNoticeSeconds = 0.25;
  // Whether fail() left the endpoints open (see above).
  bool endpointsLeftOpen() const { return keepEndpointsOpen_; }
  // The first failure notice a peer sent: the rank where that failure started (-1: none came)
  // and its sentence; peerFailure() is "stopped because rank N failed: ...". The communicator
  // reads it in its health check, which runs only while an operation is blocked -- as it reads
  // the segment's abort word -- so a call whose data all arrived still completes.
  int noticeOrigin() const { return noticeOrigin_; }
  const std::string& noticeSentence() const { return noticeSentence_; }
  Status peerFailure() const;
  // Whether any message went to or came from this peer (both sides agree once all finished).
  bool exchangedWith(int peer) const { return sendSeq_[peer] != 0 || recvSeq_[peer] != 0; }
  // Before a normal destroy: progresses until posted sends completed (at most `seconds`), so
  // the last messages of the job leave this process before its endpoints close.
  void drain(double seconds);
  // One pass over the completion queues while no efa step is running (manual-progress
  // providers move queued data only when called); errors surface on the next efa step.
  void progressIdle() {
    if (!shutDown_) (void)pollCompletions();
  }
  // The progress engine calls this after each pass over its steps that left work pending: the
  // completion queues are then read once per pass, after all the pass's posts, instead of in
  // every progress call (what callers that never call it get).
  Status endPass();
  // How many times endPass reads the queues while nothing completes (default 8). With more
  // ranks than cores, 1: the peer that would complete something is likely not running.
  void setReadsPerPass(int reads) { readsPerPass_ = std::max(1, reads); }

  // Sleeping until the network has news (src/comm_wait.cpp). canSleep: every rail's queue has
  // a wait descriptor. armSleep (under the communicator's lock, after a progress pass): true
  // when nothing is pending, so that whatever arrives from now on wakes sleep (fi_trywait);
  // false means poll again first. sleep: waits on the descriptors up to ns nanoseconds; it
  // touches no provider state, so it runs without the lock.
  // sleep returns whether a descriptor woke it (false: the time ran out). wokeFor (under the
  // lock, after the progress pass that follows a sleep) counts wake-ups that brought nothing:
  // libfabric 1.17's net provider's descriptor becomes readable for good once peers connect,
  // so poll() returns at once and a "sleeping" rank spun (2.0 s of CPU blocked 2 s). After 64
  // such wake-ups in a row the transport stops sleeping on its descriptors
  // (napsInsteadOfSleeping) and the wait policy naps on a timer instead.
  bool canSleep() const { return !waitFds_.empty() && !shutDown_ && !napsInsteadOfSleeping(); }
  bool napsInsteadOfSleeping() const {
    return napsInsteadOfSleeping_.load(std::memory_order_relaxed);
  }
  bool armSleep();
  bool sleep(int64_t ns) const;
  void wokeFor(bool woken, bool progressed);

  // "provider tcp;ofi_rxm, fabric 127.0.0.1/32, domain lo, 2 rail(s), MR mode ..., rma".
  std::string describe() const;
  size_t registrations() const;
  size_t registrationHits() const;
  // Whether user buffers' registrations are cached, or made per message (see mr_cache.hpp).
  bool cachesUserRegistrations() const { return cacheUserBuffers_; }
  // Per-message registrations still open (0 once every message has completed).
  size_t transientRegistrations() const;
  // trncclCommRegister: registers the buffer on every rail until deregistered. Messages inside
  // it use that registration whatever TRNCCL_EFA_MR_CACHE says. Deregistering fails
  // (kInvalidUsage) while a posted operation still uses it.
  Result<UserRegistration> registerUserBuffer(const void* addr, size_t bytes);
  Status deregisterUserBuffer(const UserRegistration& registration);
  size_t userRegistrations() const;
  // Fragments posted on each rail so far (striping is visible in tests and logs).
  const std::vector<size_t>& fragmentsPerRail() const { return fragmentsPerRail_; }
  // Messages that went by rendezvous (RMA reads), counted on the receiving side.
  size_t rendezvousReceives() const { return rendezvousReceives_; }
  // The rendezvous threshold agreed with a peer (0 = eager only).
  size_t rendezvousBytesWith(int peer) const { return pairRendezvous_[peer]; }

 private:
  EfaTransport(int myRank, int nranks);
  Status pollCompletions();
  // A step is waiting on the queues: reads them now, unless the engine reads them at the end
  // of the pass (endPass).
  Status pollUnlessEngineDoes();
  Result<Message*> start(TransferOp& op, bool send);
  Result<bool> post(Message& m, TransferOp& op);
  Result<bool> postFragments(Message& m, TransferOp& op);
  Result<bool> postRendezvousSend(Message& m, TransferOp& op);
  Result<bool> postRendezvousRecv(Message& m, TransferOp& op);
  // Posts one operation; true if posted, false on FI_EAGAIN or a full budget (try later).
  template <typename Call>
  Result<bool> postOne(Message& m, std::unique_ptr<FragmentContext> fc, const char* what,
                       Call call);
  void bookCompletion(FragmentContext& fc, const fi_cq_tagged_entry& entry);
  void bookFinished(const FragmentContext& fc);
  Status sizeMismatch(const Message& m) const;
  void bookAnnouncement(Message& m, const fi_cq_tagged_entry& entry);
  void releaseResources(Message& m);
  Status postNoticeReceive();
  void sendNotices(int originRank, const std::string& sentence);
  void bookNotice(FragmentContext& fc, const fi_cq_tagged_entry* entry);  // entry: null on error
  Result<bool> finish(Message& m, TransferOp& op);
  void drop(Message* m, TransferOp& op);
  char* takeStaging(size_t bytes);
  void returnStaging(char* buffer, size_t bytes);

  int myRank_;
  int nranks_;
  size_t rendezvousBytes_ = 0;    // this rank's threshold (0 when the provider lacks FI_RMA)
  std::string rendezvousSource_;  // why it is what it is, for describe()
  bool cacheUserBuffers_ = true;
  size_t rendezvousReceives_ = 0;
  ProviderChoice choice_;
  ControlSlots slots_;
  std::vector<std::unique_ptr<Rail>> rails_;
  std::vector<std::unique_ptr<MrCache>> caches_;       // one per rail (per domain)
  std::vector<size_t> sendsInFlight_, recvsInFlight_;  // posted, not completed, per rail
  std::vector<size_t> fragmentsPerRail_;
  std::vector<std::vector<fi_addr_t>> addrOf_;  // [rail][rank]
  std::vector<int> pairRails_;                  // rails shared with each peer
  std::vector<size_t> pairRendezvous_;          // threshold agreed with each peer
  std::vector<uint32_t> sendSeq_, recvSeq_;     // per peer
  // Per peer: the sequence number of the message whose turn it is to post (see post()).
  std::vector<uint32_t> nextSendToPost_, nextRecvToPost_;
  bool shutDown_ = false;
  std::vector<int> waitFds_;  // one per rail when every rail has one, else empty
  // Written under the communicator's lock, read by waits outside it.
  std::atomic<bool> napsInsteadOfSleeping_{false};
  int emptyWakes_ = 0;              // wake-ups in a row that brought no progress
  bool keepEndpointsOpen_ = false;  // fail() over ofi_rxm: never fi_close them
  // Failure notices (efa_notice.cpp): the receive posted at connect and the sends of fail().
  std::vector<std::unique_ptr<FragmentContext>> notices_;
  int noticeRecvSlot_ = -1;
  size_t noticesInFlight_ = 0;
  int noticeOrigin_ = -1;
  std::string noticeSentence_;
  bool endOfPassPolling_ = false;  // endPass has been called: progress calls do not poll
  bool stepsThisPass_ = false;     // a step is waiting on the queues: endPass reads them
  uint64_t completionsSeen_ = 0;
  int readsPerPass_ = 8;
  std::list<std::unique_ptr<Message>> messages_;  // live messages (providers hold contexts)
  std::vector<std::pair<size_t, std::unique_ptr<char[]>>> staging_;  // free buffers
};

}  // namespace trnccl::efa
