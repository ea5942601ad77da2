// The communicator at work: the ordered queue of operations and the progress engine that
// advances it, health checks while blocked, waiting, flush, destroy's network drain and abort.
// init is in comm_init.cpp, the topology side (transport per peer, dumps, traffic) in
// comm_topology.cpp, buffer registration in comm_registration.cpp.
#include "comm.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "collectives/registry.hpp"
#include "core/dtype.hpp"
#include "core/log.hpp"
#include "flight_signal.hpp"
#include "transports/shm/shared_alloc.hpp"

namespace trnccl {
namespace {

std::string describeCall(const std::vector<CollArgs>& calls) {
  const CollArgs& a = calls.front();
  if (a.kind == CollKind::kSendRecv) {
    std::string text;
    for (const CollArgs& c : calls) {
      text += strformat("%s%s(count=%zu, %s, peer=%d)", text.empty() ? "" : "+",
                        c.isSend ? "Send" : "Recv", c.count, dtypeName(c.dtype), c.peer);
    }
    return text;
  }
  std::string text = strformat("%s(count=%zu, %s", collName(a.kind), a.count, dtypeName(a.dtype));
  if (a.kind == CollKind::kAllReduce || a.kind == CollKind::kReduce ||
      a.kind == CollKind::kReduceScatter)
    text += strformat(", %s", redOpName(a.op));
  if (a.kind == CollKind::kBroadcast || a.kind == CollKind::kReduce)
    text += strformat(", root=%d", a.root);
  return text + ")";
}

// A queued call (or a fused group of point-to-point calls) and how to plan it. Queued calls
// own a copy of their arguments; a blocking call borrows the caller's, which outlive it.
class CallOperation final : public Operation {
 public:
  CallOperation(std::vector<CollArgs> calls, const Planner* planner, Algorithm algo)
      : Operation(calls.front().kind),
        owned_(std::move(calls)),
        calls_(owned_.data()),
        ncalls_(owned_.size()),
        planner_(planner),
        algo_(algo) {
    pinSharedBuffers();
  }
  // Borrows the calls, which outlive the operation (run() waits for it).
  CallOperation(const CollArgs* calls, size_t ncalls, const Planner* planner, Algorithm algo)
      : Operation(calls[0].kind), calls_(calls), ncalls_(ncalls), planner_(planner), algo_(algo) {
    pinSharedBuffers();
  }

  std::string description() const override {
    return describeCall(std::vector<CollArgs>(calls_, calls_ + ncalls_));
  }

 private:
  // trncclMemAlloc buffers cannot be freed while the call is queued (shared_alloc.hpp).
  void pinSharedBuffers() {
    for (size_t i = 0; i < ncalls_; ++i)
      for (const void* p : {calls_[i].sendbuff, static_cast<const void*>(calls_[i].recvbuff)})
        if (auto pin = shm::pinSharedRegion(p)) pins.push_back(std::move(pin));
  }

  Status plan(ScheduleBuilder& b) override {
    if (ncalls_ == 1) return planner_->build(b, calls_[0], algo_);
    ConcurrentSteps together(b);  // a group of point-to-point calls progresses as one
    for (size_t i = 0; i < ncalls_; ++i)
      TRNCCL_RETURN_IF_ERROR(planner_->build(b, calls_[i], algo_));
    return Status::ok();
  }

  std::vector<CollArgs> owned_;
  const CollArgs* calls_;
  size_t ncalls_;
  const Planner* planner_;
  Algorithm algo_;
};

// A call planned by its caller (Communicator::runPlan).
class PlanOperation final : public Operation {
 public:
  PlanOperation(CollKind kind, std::string description, Communicator::PlanFn plan,
                const std::vector<const void*>& buffers)
      : Operation(kind), description_(std::move(description)), plan_(std::move(plan)) {
    // trncclMemAlloc buffers cannot be freed while the call is queued (peers may read them).
    for (const void* p : buffers)
      if (auto pin = shm::pinSharedRegion(p)) pins.push_back(std::move(pin));
  }
  std::string description() const override { return description_; }

 private:
  Status plan(ScheduleBuilder& b) override { return plan_(b); }

  std::string description_;
  Communicator::PlanFn plan_;
};

}  // namespace

Result<std::shared_ptr<Communicator>> Communicator::create(int nranks, const trncclUniqueId& id,
                                                           int rank, const CommOptions& options) {
  std::shared_ptr<Communicator> comm(new Communicator());
  Status status = comm->init(nranks, id, rank, options);
  if (!status.isOk()) {
    // Tell the node's other ranks why this one gives up before it goes (they would otherwise
    // see it exit and blame it for what another rank did); the first such report stands.
    if (comm->segment_.header() && !comm->segment_.aborted())
      comm->segment_.raiseAbort(status.code(), rank,
                                strformat("rank %d: %s", rank, status.message().c_str()));
    return status;
  }
  return comm;
}

Communicator::~Communicator() {
  unregisterFromSignalDumps(this);
}

Result<std::shared_ptr<Operation>> Communicator::enqueue(const std::vector<CollArgs>& calls) {
  const CollArgs& first = calls.front();
  auto algo = planner_->choose(first.kind, first.count * dtypeSize(first.dtype));
  TRNCCL_RETURN_IF_ERROR(algo.status());
  auto op = std::make_shared<CallOperation>(calls, planner_.get(), algo.value());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TRNCCL_RETURN_IF_ERROR(pushLocked(op));
    op->flightSeq = flight_.record(calls.data(), calls.size(), algorithmName(algo.value()));
  }
  return std::shared_ptr<Operation>(std::move(op));
}

Status Communicator::run(const CollArgs* calls, size_t ncalls) {
  const CollArgs& first = calls[0];
  auto algo = planner_->choose(first.kind, first.count * dtypeSize(first.dtype));
  TRNCCL_RETURN_IF_ERROR(algo.status());
  // The operation lives on this stack: the queue holds a non-owning pointer, and this call
  // returns only once the operation has left the queue (finished, failed or aborted).
  CallOperation op(calls, ncalls, planner_.get(), algo.value());
  std::shared_ptr<Operation> handle(std::shared_ptr<Operation>(), &op);
  {
    // Queued and given its first progress pass under one lock: a small call on an idle
    // communicator often completes here, without a second round trip through the mutex.
    std::lock_guard<std::mutex> lock(mutex_);
    TRNCCL_RETURN_IF_ERROR(pushLocked(handle));
    op.flightSeq = flight_.record(calls, ncalls, algorithmName(algo.value()));
    if (queue_.size() == 1) progressLocked();
    if (op.finished.load(std::memory_order_acquire)) return std::move(op.result);
  }
  return wait(handle, -1);
}

Result<std::shared_ptr<Operation>> Communicator::enqueuePlan(
    CollKind kind, std::string description, PlanFn plan, const std::vector<const void*>& buffers) {
  auto op = std::make_shared<PlanOperation>(kind, std::move(description), std::move(plan), buffers);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TRNCCL_RETURN_IF_ERROR(pushLocked(op));
    if (flight_.enabled()) op->flightSeq = flight_.recordPlanned(kind, op->description());
  }
  return std::shared_ptr<Operation>(std::move(op));
}

Status Communicator::runPlan(CollKind kind, std::string description, PlanFn plan,
                             const std::vector<const void*>& buffers) {
  auto op = enqueuePlan(kind, std::move(description), std::move(plan), buffers);
  TRNCCL_RETURN_IF_ERROR(op.status());
  return wait(op.value(), -1);
}

Status Communicator::push(const std::shared_ptr<Operation>& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  return pushLocked(op);
}

Status Communicator::pushLocked(const std::shared_ptr<Operation>& op) {
  if (!failure_.isOk())
    return Status(failure_.code() == Code::kAborted ? Code::kAborted : Code::kInvalidUsage,
                  strformat("rank %d %s on %s: the communicator is unusable after an earlier "
                            "error (%s); destroy or abort it",
                            rank_, op->description().c_str(), options_.name.c_str(),
                            failure_.message().c_str()));
  TRNCCL_TRACE(log::kColl, "%s rank %d enqueue %s", options_.name.c_str(), rank_,
               op->description().c_str());
  queue_.push_back(op);
  return Status::ok();
}

std::string Communicator::describePeer(int rank) const {
  if (rank < 0 || rank >= nranks_) return "an unknown rank";
  return strformat("rank %d (pid %d on %s)", rank, peers_[rank].pid, peers_[rank].hostName);
}

Status Communicator::healthLocked(Operation& op) {
  if (efa_) efa_->progressIdle();  // the head operation may be waiting on shm only
  if (FlightEntry* e = flight_.find(op.flightSeq)) {
    e->waitingFor = op.blockedOnPeer();
    e->blockedOn = op.blockedOn();
  }
  if (abortRequested_.load(std::memory_order_acquire))
    return makeError(Code::kAborted,
                     "trncclCommAbort was called on this communicator while "
                     "the operation was in progress");
  if (segment_.aborted()) {
    int who = segment_.abortRank();
    return makeError(who == rank_ ? Code::kAborted : Code::kRemoteError,
                     "stopped because rank %d failed: %s", who, segment_.abortReason().c_str());
  }
  if (efa_) TRNCCL_RETURN_IF_ERROR(efa_->peerFailure());  // a failure on another node
  int64_t now = nowNs();
  int peer = op.blockedOnPeer();
  // Only the peer this rank waits for matters: a peer that finished and exited is fine, and a
  // crash elsewhere reaches us through the segment's abort flag raised by its neighbours.
  if (peer >= 0 && peer != rank_ && now - lastLivenessCheckNs_ > 5'000'000) {
    lastLivenessCheckNs_ = now;
    int local = localOfRank_[peer];
    bool departed =
        local >= 0 && segment_.rankArea(local)->departed.load(std::memory_order_acquire);
    bool exited = watch_.isDead(peer);
    // A peer can write what this rank waits for, finish and leave (even exit) between this
    // rank's last progress pass and this check: this rank may have been descheduled there.
    // Keep progressing for a grace period before calling the peer gone. Over shm the peer's
    // writes are already in the segment, so the grace lasts until the next check (at least
    // 5 ms and 63 passes later). Over the network its last message can still be on its way
    // (in socket buffers, or not yet read by the provider): a provider that completes a send
    // once the socket holds its bytes (net) lets the sender leave, and even exit, before this
    // rank has read them, and they stay readable; that grace is kDepartedGraceNs.
    bool inGrace = false;
    if (departed || exited) {
      if (departedSeenNs_ == 0) departedSeenNs_ = now;
      const int64_t grace = ctx_.transportOfPeer[peer] == efa_.get() ? kDepartedGraceNs : 0;
      inGrace = now - departedSeenNs_ <= grace;  // with no grace, only the first sighting
    }
    if (departed && !inGrace)
      return makeError(Code::kInvalidUsage,
                       "%s destroyed its communicator while this rank was still %s it: the "
                       "ranks made different numbers of calls",
                       describePeer(peer).c_str(), op.blockedOn());
    TRNCCL_RETURN_IF_ERROR(op.probeMismatch(ctx_, local));
    if (exited && !inGrace)
      return makeError(Code::kRemoteError,
                       "%s exited while this rank was %s it; the job cannot continue (look at "
                       "rank %d's output for why it died)",
                       describePeer(peer).c_str(), op.blockedOn(), peer);
  }
  if (now - op.blockedSinceNs(now) > static_cast<int64_t>(options_.timeoutSeconds * 1e9))
    return makeError(Code::kTimeout,
                     "not complete after %.1f s: still %s %s. Raise TRNCCL_TIMEOUT (or the "
                     "config's timeoutMs) if the peer is just slow; otherwise it is stuck or "
                     "made a different call",
                     options_.timeoutSeconds, op.blockedOn(), describePeer(peer).c_str());
  return Status::ok();
}

void Communicator::failLocked(const Status& status) {
  const bool first = failure_.isOk();
  if (first) noteRunningLocked();
  for (auto& op : queue_) flight_.ended(op->flightSeq, false);
  if (failure_.isOk()) {
    failure_ = status;
    // Where the failure started, and why: here, or at a peer whose failure reached this rank
    // through the node's segment or a network notice. Peers are told that, not "rank r
    // failed because rank o failed". A thread waiting here fails as soon as it sees
    // abortRequested_, possibly before requestAbort raises the segment's flag: the peers
    // still read that this rank aborted.
    int origin = rank_;
    std::string cause =
        abortRequested_.load(std::memory_order_acquire) ? abortSentence() : status.message();
    if (segment_.aborted()) {
      origin = segment_.abortRank();
      cause = segment_.abortReason();
    } else {
      if (efa_ && efa_->noticeOrigin() >= 0) {
        origin = efa_->noticeOrigin();
        cause = efa_->noticeSentence();
      }
      segment_.raiseAbort(status.code(), origin, cause);
    }
    // Tells the efa peers, then stops: nothing posted may land in user buffers after this.
    if (efa_) efa_->fail(origin, cause);
    // Logged as a warning when a caller receives it (api/errors.cpp); INFO here has the time.
    TRNCCL_INFO(log::kColl, "communicator failed: %s", status.message().c_str());
    setLastError(status.message());
    // A timeout, a peer's failure, a mismatch or an abort: what an operator reads first.
    if (!flightDir_.empty()) {
      Status dumped = dumpFlightLocked(flightDir_, status.message());
      if (!dumped.isOk()) TRNCCL_WARN(log::kColl, "%s", dumped.message().c_str());
    }
  }
  bool head = true;
  for (auto& op : queue_) {
    op->result = head ? status
                      : Status(status.code(),
                               "rank " + std::to_string(rank_) + " " + op->description() +
                                   ": not run, an earlier operation failed: " + status.message());
    op->pins.clear();
    op->finished.store(true, std::memory_order_release);
    head = false;
  }
  queue_.clear();
}

void Communicator::noteRunningLocked() {
  if (queue_.empty()) return;
  const Operation& op = *queue_.front();
  if (FlightEntry* e = flight_.find(op.flightSeq)) {
    e->stepsDone = op.stepsDone();
    e->stepsTotal = op.stepsTotal();
    e->waitingFor = op.blockedOnPeer();
    e->blockedOn = op.blockedOn();
    // When it first waited, on the precise clock, moved onto the recorder's coarse one.
    if (const int64_t since = op.blockedSinceNs(); since > 0)
      e->startedNs = FlightRecorder::coarseNowNs() - (nowNs() - since);
  }
}

Status Communicator::dumpFlightLocked(const std::string& dir, const std::string& reason) {
  noteRunningLocked();
  FlightRecorder::Header h;
  h.rank = rank_;
  h.nranks = nranks_;
  h.comm = options_.name;
  h.commKey = commKey_;
  h.host = rank_ < static_cast<int>(peers_.size()) ? peers_[rank_].hostName : "";
  h.pid = static_cast<int>(getpid());
  h.reason = reason;
  h.lastError = failure_.isOk() ? "" : failure_.message();
  return flight_.dumpTo(dir, h);
}

Status Communicator::dumpFlightRecorder(const std::string& dir, const std::string& reason) {
  const std::string where = dir.empty() ? flightDir_ : dir;
  if (where.empty())
    return makeError(Code::kInvalidUsage,
                     "rank %d: no directory for the flight recorder (pass one, or set "
                     "TRNCCL_FLIGHT_RECORDER_DIR)",
                     rank_);
  if (!flight_.enabled())
    return makeError(Code::kInvalidUsage,
                     "rank %d: the flight recorder is off (TRNCCL_FLIGHT_RECORDER_ENTRIES=0)",
                     rank_);
  std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
  const int64_t until = nowNs() + 1'000'000'000;
  while (!lock.try_lock()) {
    if (nowNs() > until)
      return makeError(Code::kInternalError,
                       "rank %d: the flight recorder was not dumped: a thread held the "
                       "communicator for over a second",
                       rank_);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return dumpFlightLocked(where, reason);
}

void Communicator::progressLocked() {
  while (!queue_.empty()) {
    Operation* op = queue_.front().get();  // no reference count traffic on the hot path
    Status status;
    if (!failure_.isOk()) {
      status = failure_;
    } else {
      if (!op->started()) flight_.started(op->flightSeq);
      auto done = op->progress(ctx_);
      status = done.status();
      if (status.isOk() && done.value()) {
        flight_.ended(op->flightSeq, true);
        op->result = Status::ok();
        op->pins.clear();
        op->finished.store(true, std::memory_order_release);
        queue_.pop_front();
        departedSeenNs_ = 0;
        continue;
      }
      // Waiting on peers. Health checks read the clock and poll pidfds: every 64th pass is
      // often enough to notice failures within microseconds and keeps the spin loop tight.
      if (status.isOk() && efa_) status = efa_->endPass();
      if (status.isOk() && (++blockedPasses_ & 63) == 0) status = healthLocked(*op);
      if (status.isOk()) return;
      // A peer's failure notice says why; a connection reset that may follow it does not.
      if (efa_ && status.code() == Code::kRemoteError) {
        efa_->progressIdle();
        if (efa_->noticeOrigin() >= 0) status = efa_->peerFailure();
      }
      status = status.withContext(
          strformat("rank %d %s on %s: ", rank_, op->description().c_str(), options_.name.c_str()));
    }
    failLocked(status);
    return;
  }
}

Status Communicator::flush() {
  std::shared_ptr<Operation> last;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.empty()) return Status::ok();
    last = queue_.back();
  }
  return wait(last, -1);
}

// Every operation has finished. Each efa peer this rank exchanged messages with gets one byte
// (the next message of the pair), and this rank waits for that peer's byte: a peer sends it
// only once its own operations finished, so by then it has consumed everything this rank sent
// it, and the endpoints may close. Without it a closing endpoint could take a peer's unread
// last message with it: over net a send completes once the socket holds the bytes (a 4-rank
// efa-net broadcast lost its last 1 MiB message to a destroyed sender in about 1 of 13 runs
// of that suite). Bounded: a peer that left the node segment or exited is not waited for, and
// one that destroys later (it had other work first) or never at most kFarewellSeconds.
void Communicator::drainNetwork() {
  std::lock_guard<std::mutex> lock(mutex_);
  // A peer's failure notice: the job is broken, its farewells would not come.
  if (!efa_ || !failure_.isOk() || efa_->noticeOrigin() >= 0) return;
  const Deadline deadline = Deadline::after(std::min(kFarewellSeconds, options_.timeoutSeconds));
  struct Farewell {
    TransferOp send, recv;
    bool sent = false, received = false;  // done, or no longer waited for
    bool posted = true;                   // its receive may still be posted
  };
  std::vector<Farewell> farewells;
  static const char kByte = 1;
  farewellBytes_.assign(nranks_, 0);
  for (int peer = 0; peer < nranks_; ++peer) {
    if (ctx_.transportOfPeer[peer] != efa_.get() || !efa_->exchangedWith(peer)) continue;
    Farewell f;
    f.send.peer = f.recv.peer = peer;
    f.send.bytes = f.recv.bytes = 1;
    f.send.src = &kByte;
    f.recv.dst = &farewellBytes_[peer];
    farewells.push_back(f);
  }
  auto gone = [&](int peer) {
    int local = localOfRank_[peer];
    return (local >= 0 && segment_.rankArea(local)->departed.load(std::memory_order_acquire)) ||
           watch_.isDead(peer);
  };
  bool waiting = !farewells.empty();
  while (waiting && !deadline.expired()) {
    waiting = false;
    for (Farewell& f : farewells) {
      // An error (the peer made more calls, or its connection broke) ends the wait for it.
      if (!f.sent) {
        auto r = efa_->progressSend(f.send);
        f.sent = !r.isOk() || r.value();
      }
      if (!f.received) {
        auto r = efa_->progressRecv(f.recv);
        f.posted = !r.isOk() || !r.value();  // after an error, parts of it may be
        f.received = !r.isOk() || r.value() || gone(f.recv.peer);
      }
      waiting = waiting || !f.sent || !f.received;
    }
    if (waiting && !efa_->endPass().isOk()) break;  // the queues are read once per pass
    if (waiting) std::this_thread::yield();         // the peer may need this core
  }
  efa_->drain(std::max(0.0, deadline.remainingMs() / 1000.0));
  // A farewell receive still posted could land after this returns: close the endpoints now.
  if (std::any_of(farewells.begin(), farewells.end(), [](const Farewell& f) { return f.posted; }))
    efa_->shutdown();
}

void Communicator::markDeparted() {
  segment_.rankArea(localOfRank_[rank_])->departed.store(1, std::memory_order_release);
}

std::string Communicator::abortSentence() const {
  return strformat("rank %d called trncclCommAbort on %s", rank_, options_.name.c_str());
}

void Communicator::requestAbort() {
  abortRequested_.store(true, std::memory_order_release);
  segment_.raiseAbort(Code::kAborted, rank_, abortSentence());
  std::lock_guard<std::mutex> lock(mutex_);
  failLocked(makeError(Code::kAborted, "rank %d %s: aborted by trncclCommAbort", rank_,
                       options_.name.c_str()));
}

Status Communicator::asyncError() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_.isOk() && !queue_.empty()) progressLocked();
  if (failure_.isOk()) {
    // Nothing queued: still notice peers that failed or died, as NCCL's async error does.
    if (segment_.aborted() && segment_.abortRank() != rank_) {
      failLocked(makeError(Code::kRemoteError, "rank %d %s: rank %d failed: %s", rank_,
                           options_.name.c_str(), segment_.abortRank(),
                           segment_.abortReason().c_str()));
    }
  }
  return failure_;
}

void Communicator::setLastError(const std::string& text) {
  std::lock_guard<std::mutex> lock(errorMutex_);
  lastError_ = text;
}

std::string Communicator::lastError() {
  std::lock_guard<std::mutex> lock(errorMutex_);
  return lastError_;
}

}  // namespace trnccl
