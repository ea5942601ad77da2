// PendingCall: exactly one thread at a time drives a request (trncclWait / trncclTest); the
// others wait on a condition variable, so a Work.wait() on the user's thread, the watcher and
// a group end never touch the request together.
#include "pending_call.hpp"

#include <stdexcept>

namespace trnccl::torch_ext {

namespace {
// How long a thread waits for another thread's drive before looking again.
constexpr std::chrono::milliseconds kOtherDriverSlice(100);
}  // namespace

std::string lastErrorText(trncclComm_t comm, trncclResult_t result) {
  // The thread's text comes from the call that just failed here; the communicator's may be
  // from another thread's call, so it is only the fallback.
  const char* text = trncclGetLastError(nullptr);
  if (!text || !*text) text = comm ? trncclGetLastError(comm) : nullptr;
  if (!text || !*text) text = trncclGetErrorString(result);
  return text;
}

PendingCall::PendingCall(trncclComm_t comm, trncclRequest_t request, std::string what,
                         std::vector<at::Tensor> keepAlive, std::vector<at::Tensor> outputs,
                         Finisher finisher)
    : comm_(comm),
      request_(request),
      what_(std::move(what)),
      keepAlive_(std::move(keepAlive)),
      outputs_(std::move(outputs)),
      finisher_(std::move(finisher)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

PendingCall::~PendingCall() = default;

void PendingCall::settle(trncclResult_t result, const std::string& message,
                         std::unique_lock<std::mutex>& lock) {
  request_ = nullptr;  // trnccl freed it when it reported the end
  Finisher finisher = std::move(finisher_);
  lock.unlock();
  std::exception_ptr failure;
  if (result == trncclSuccess) {
    try {
      if (finisher) finisher();
    } catch (...) {
      failure = std::current_exception();
    }
  } else {
    failure = std::make_exception_ptr(std::runtime_error("trnccl: " + message));
  }
  finisher = nullptr;  // it holds tensors: dropped outside our lock (see below)
  lock.lock();
  completed_ = true;
  error_ = failure;
  driving_ = false;
  std::vector<at::Tensor> released = std::move(keepAlive_);
  lock.unlock();
  ended_.notify_all();
  // Dropping a tensor Python shares takes the GIL: never under our lock, which a thread
  // holding the GIL may be waiting for (Work.is_completed()).
  released.clear();
  // Callbacks chained on the future (DDP's comm hooks) run here, outside our lock.
  if (failure)
    future_->setError(failure);
  else
    future_->markCompleted(c10::IValue(outputs_));
  lock.lock();
}

PendingCall::Drive PendingCall::driveOnce(std::chrono::milliseconds limit,
                                          std::unique_lock<std::mutex>& lock) {
  if (completed_) return Drive::kEnded;
  if (driving_ || request_ == nullptr) {
    // Another thread drives it, or it is queued in a group that settles it at group end.
    ended_.wait_for(lock, limit.count() < 0 ? kOtherDriverSlice : limit);
    return completed_ ? Drive::kEnded : Drive::kSomeoneElse;
  }
  driving_ = true;
  lock.unlock();
  const trncclResult_t result = trncclWait(
      &request_, limit.count() < 0 ? TRNCCL_TIMEOUT_DEFAULT : static_cast<int64_t>(limit.count()));
  const bool stillRunning = result == trncclTimeout && request_ != nullptr;
  const std::string message =
      result == trncclSuccess || stillRunning ? std::string() : lastErrorText(comm_, result);
  lock.lock();
  if (stillRunning) {
    driving_ = false;
    ended_.notify_all();  // a waiter with a longer limit may take over
    return Drive::kStillRunning;
  }
  settle(result, message, lock);
  return Drive::kEnded;
}

void PendingCall::wait(std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (limit.count() < 0) {
    // No limit of the caller's: the communicator's timeout ends the call (with trnccl's
    // sentence naming the peer it waited for).
    while (driveOnce(kNoLimit, lock) != Drive::kEnded) {
    }
  } else {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      const auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      // Under a millisecond left counts as expired: trnccl's wait rounds to its own clock.
      if (remaining.count() < 1 && !completed_) {
        throw std::runtime_error(
            "trnccl: " + what_ + " did not finish within the wait's " +
            std::to_string(limit.count()) +
            " ms; it is still running (wait again), or raise the timeout "
            "(Work.wait(timeout), init_process_group(timeout=...) or TRNCCL_TIMEOUT)");
      }
      if (driveOnce(remaining, lock) == Drive::kEnded) break;
    }
  }
  if (error_) std::rethrow_exception(error_);
}

bool PendingCall::poll() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (completed_) return true;
  if (driving_ || request_ == nullptr) return false;
  driving_ = true;
  lock.unlock();
  int done = 0;
  const trncclResult_t result = trncclTest(&request_, &done);
  const bool ended = done != 0 || request_ == nullptr;
  const std::string message =
      result == trncclSuccess || !ended ? std::string() : lastErrorText(comm_, result);
  lock.lock();
  if (!ended) {
    driving_ = false;
    ended_.notify_all();
    return false;
  }
  settle(result, message, lock);
  return true;
}

bool PendingCall::driveFor(std::chrono::milliseconds slice) {
  std::unique_lock<std::mutex> lock(mutex_);
  return driveOnce(slice, lock) == Drive::kEnded;
}

void PendingCall::settleFromGroup(trncclResult_t result, const std::string& message) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (completed_) return;
  driving_ = true;
  settle(result, message, lock);
}

bool PendingCall::completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool PendingCall::succeeded() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !error_;
}

std::exception_ptr PendingCall::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

}  // namespace trnccl::torch_ext
