// Waiting for an operation: the wait policy. A waiter spins on the word its operation waits
// for (TRNCCL_SPIN_COUNT progress passes), then yields the core, and once nothing has moved
// for TRNCCL_SPIN_TIME_US it sleeps on the node segment's doorbell (a futex that every store
// a peer may wait for rings while someone sleeps), so that a rank blocked on a slower peer
// leaves the core to that peer or to the training computation. Sleeps are bounded: health
// checks (dead peers, TRNCCL_TIMEOUT) still run. A wait for an efa peer sleeps on the
// completion queues' wait descriptors instead (poll, armed by fi_trywait), which network events
// make readable: its completions ring no doorbell. TRNCCL_EFA_SLEEP=0 keeps it yielding; over a
// provider whose descriptor stays readable (net) it naps on a timer (EfaTransport::wokeFor).
// When the blocked peer is unknown, naps are short.
#include <sched.h>

#include <algorithm>

#include "comm.hpp"
#include "core/log.hpp"

namespace trnccl {
namespace {

// Without efa peers every event a sleeper waits for rings the doorbell; the nap only bounds
// how late a dead peer or an expired timeout is noticed.
constexpr int64_t kShmNapNs = 10'000'000;
// With efa peers, their completions do not ring it: naps start short and double to this.
constexpr int64_t kEfaNapMinNs = 50'000;
constexpr int64_t kEfaNapMaxNs = 1'000'000;
// Sleeping on the completion queues' wait descriptors, which the network wakes: the nap only
// bounds how late a dead peer or an expired timeout is noticed, as for shm.
constexpr int64_t kNetworkNapNs = kShmNapNs;

inline void cpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

bool Communicator::test(const std::shared_ptr<Operation>& op) {
  Operation::SpinHint unused;
  return test(op, &unused);
}

bool Communicator::test(const std::shared_ptr<Operation>& op, Operation::SpinHint* hint) {
  if (op->finished.load(std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  progressLocked();
  *hint = queue_.empty() ? Operation::SpinHint{} : queue_.front()->spinHint();
  hint->progressEvents = ctx_.progressEvents;
  if (efa_ && !queue_.empty()) {
    const int peer = queue_.front()->blockedOnPeer();
    hint->blockedOnPeer = peer;
    hint->overNetwork = peer < 0 || ctx_.transportOfPeer[peer] == efa_.get();
  }
  return op->finished.load(std::memory_order_acquire);
}

// One progress pass that also runs the health checks (after a sleep they are due).
bool Communicator::testWithHealthCheck(const std::shared_ptr<Operation>& op,
                                       Operation::SpinHint* hint) {
  if (op->finished.load(std::memory_order_acquire)) return true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    blockedPasses_ |= 63;  // the pass's blocked-pass count reaches a multiple of 64
  }
  return test(op, hint);
}

bool Communicator::sleepOnce(const std::shared_ptr<Operation>& op, Operation::SpinHint* hint,
                             int64_t napNs) {
  const uint32_t ticket = segment_.beginSleep();
  // Checked after announcing the sleep: a peer's store after this pass rings the doorbell.
  const bool done = testWithHealthCheck(op, hint);
  if (!done) segment_.sleep(ticket, napNs);
  segment_.endSleep();
  return done;
}

bool Communicator::sleepOnNetwork(const std::shared_ptr<Operation>& op, Operation::SpinHint* hint,
                                  int64_t napNs) {
  if (testWithHealthCheck(op, hint)) return true;
  bool armed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    armed = efa_->armSleep();
  }
  if (!armed) return false;
  const uint64_t events = hint->progressEvents;
  const bool woken = efa_->sleep(napNs);  // without the lock: another thread may abort meanwhile
  const bool done = test(op, hint);
  std::lock_guard<std::mutex> lock(mutex_);
  efa_->wokeFor(woken, done || hint->progressEvents != events);
  return done;
}

Status Communicator::wait(const std::shared_ptr<Operation>& op, double timeoutSeconds) {
  Operation::SpinHint hint;
  if (test(op, &hint)) return op->result;  // the common case for small calls: no clock read
  // The clock is read only once a wait outlasts its first 64 polls: most small calls finish
  // before that, and a clock read costs as much as the rest of their software path.
  Deadline deadline;
  bool deadlineSet = timeoutSeconds < 0;
  int polls = 0;
  int64_t stillSinceNs = 0;  // when progress was last seen, once yielding
  uint64_t events = hint.progressEvents;
  int64_t napNs = kEfaNapMinNs;
  while (!test(op, &hint)) {
    bool slept = false;
    // A rank this one just woke may be queued behind it on this core (the scheduler places a
    // woken task near its waker): measured, the woken rank ran only when this one's spin
    // budget ran out, 1-2 ms later.
    if (segment_.takeWokeSleepers()) sched_yield();
    // Watch the one word the head operation waits for (it lives in the node segment, which
    // outlives every operation): the progress pass reruns as soon as a peer writes it, and
    // after at most 64 pauses, so that health checks and other waiters still get their turn.
    // TRNCCL_SPIN_COUNT counts progress passes, however long each watches its word.
    if (++polls > spinCount_) {
      const int64_t now = sleepAfterNs_ >= 0 ? nowNs() : 0;
      // Sleeping on the network's wait descriptors, or napping on a timer where the provider's
      // descriptors cannot be slept on (napsInsteadOfSleeping) -- with efa peers only.
      const bool napOnNetwork = hint.overNetwork && efa_->napsInsteadOfSleeping();
      const bool onNetwork = hint.overNetwork && hint.blockedOnPeer >= 0 && !napOnNetwork;
      if (sleepAfterNs_ < 0 || (onNetwork && !efa_->canSleep())) {
        sched_yield();
      } else if (stillSinceNs == 0 || hint.progressEvents != events) {
        stillSinceNs = now;
        events = hint.progressEvents;
        napNs = kEfaNapMinNs;
        sched_yield();
      } else if (now - stillSinceNs < sleepAfterNs_) {
        sched_yield();
      } else {
        int64_t nap = onNetwork ? kNetworkNapNs : hint.overNetwork ? napNs : kShmNapNs;
        if (deadlineSet && timeoutSeconds >= 0)
          nap = std::max<int64_t>(1000, std::min(nap, deadline.endNs() - now));
        if (onNetwork ? sleepOnNetwork(op, &hint, nap) : sleepOnce(op, &hint, nap)) break;
        if (efa_) napNs = std::min(kEfaNapMaxNs, napNs * 2);
        slept = true;
      }
    } else if (hint.word) {
      for (int i = 0; i < watchPauses_ && hint.word->load(std::memory_order_acquire) == hint.seen;
           ++i)
        cpuRelax();
    } else if (hint.overNetwork && efaPeerOnThisMachine_ && (polls & 15) == 0) {
      // A socket's data wakes its reader on the sender's core (the kernel expects the sender
      // to sleep next): a peer on this machine that slept on the network queues behind this
      // spinning rank until it yields. Spinning the whole budget (2000 passes, milliseconds
      // over tcp) made such wake-ups 0.13-3.8 ms late (wait_perf, TRNCCL_EFA_SLEEP=1, 2 ranks
      // over tcp;ofi_rxm); yielding every 64 passes 0.14-0.58 ms, every 16 0.14-0.31 ms. No
      // cost seen in 8 B sendrecv/all-reduce latency (3 alternating rounds, net and tcp).
      sched_yield();
    } else {
      cpuRelax();
    }
    if (timeoutSeconds < 0 || ((polls & 63) != 0 && !slept)) continue;
    if (!deadlineSet) {
      deadline = Deadline::after(timeoutSeconds);
      deadlineSet = true;
    } else if (deadline.expired())
      return makeError(Code::kInProgress,
                       "rank %d %s on %s: still in progress after the "
                       "wait's %.3f s timeout",
                       rank_, op->description().c_str(), options_.name.c_str(), timeoutSeconds);
  }
  return op->result;
}

}  // namespace trnccl
