// One trnccl request seen from torch: who drives it, how it ends, and what must stay alive
// until it has ended. Shared by the Work handed to Python and, when that Work is dropped (or
// its future is awaited) before the call finished, by the watcher thread that completes it.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <trnccl.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace trnccl::torch_ext {

// Runs once the library reports success: copies out of staging buffers into the caller's
// tensors. May throw (an exception then fails the call).
using Finisher = std::function<void()>;

class PendingCall {
 public:
  // request == nullptr: the call is queued in an open group and settles at group end.
  PendingCall(trncclComm_t comm, trncclRequest_t request, std::string what,
              std::vector<at::Tensor> keepAlive, std::vector<at::Tensor> outputs,
              Finisher finisher);
  ~PendingCall();
  PendingCall(const PendingCall&) = delete;
  PendingCall& operator=(const PendingCall&) = delete;

  // A limit meaning "until the communicator's timeout" (TRNCCL_TIMEOUT / the group's).
  static constexpr std::chrono::milliseconds kNoLimit{-1};
  // Blocks until the call ends or `limit` passes. Throws the call's error, or a timeout
  // error (the call then stays pending and may be waited for again).
  void wait(std::chrono::milliseconds limit);
  // One bounded pass; true once the call has ended (successfully or not).
  bool poll();
  // Drives the call for up to `slice` (kNoLimit: until it ends) without throwing; true once
  // it has ended.
  bool driveFor(std::chrono::milliseconds slice);
  // Called by the process group at group end with the group's result.
  void settleFromGroup(trncclResult_t result, const std::string& message);

  bool completed() const;
  bool succeeded() const;
  std::exception_ptr error() const;
  const std::vector<at::Tensor>& outputs() const { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> future() const { return future_; }
  const std::string& what() const { return what_; }

 private:
  enum class Drive { kEnded, kStillRunning, kSomeoneElse };
  // Waits on the request up to `limit` unless another thread drives it.
  Drive driveOnce(std::chrono::milliseconds limit, std::unique_lock<std::mutex>& lock);
  void settle(trncclResult_t result, const std::string& message,
              std::unique_lock<std::mutex>& lock);

  trncclComm_t comm_;
  trncclRequest_t request_;
  const std::string what_;
  std::vector<at::Tensor> keepAlive_;
  std::vector<at::Tensor> outputs_;
  Finisher finisher_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;

  mutable std::mutex mutex_;
  std::condition_variable ended_;
  bool driving_ = false;
  bool completed_ = false;
  std::exception_ptr error_;
};

// The text trnccl gave for the last failure on comm (or on this thread).
std::string lastErrorText(trncclComm_t comm, trncclResult_t result);

}  // namespace trnccl::torch_ext
