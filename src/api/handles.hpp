// The C handles behind trncclComm_t and trncclRequest_t, and the helpers every entry point
// uses to validate, report and convert errors.
#pragma once

#include <atomic>
#include <memory>

#include "comm.hpp"
#include "core/status.hpp"
#include "trnccl.h"

struct trncclComm {
  std::shared_ptr<trnccl::Communicator> impl;
  std::atomic<int> activeCalls{0};
};

struct trncclRequest {
  std::shared_ptr<trnccl::Communicator> comm;
  std::shared_ptr<trnccl::Operation> op;
};

namespace trnccl::api {

trncclResult_t toResult(Code code);
// Records the error as the last error of comm (if any) and of this thread, logs it, and
// returns its trncclResult_t.
trncclResult_t report(trncclComm_t comm, const Status& status);
// This thread's last error text (errors without a communicator, e.g. from init).
const char* threadError();

// Counts a call in progress so that trncclCommAbort can wait for it to leave.
class CallGuard {
 public:
  explicit CallGuard(trncclComm_t comm) : comm_(comm) {
    if (comm_) comm_->activeCalls.fetch_add(1, std::memory_order_acq_rel);
  }
  ~CallGuard() {
    if (comm_) comm_->activeCalls.fetch_sub(1, std::memory_order_acq_rel);
  }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;

 private:
  trncclComm_t comm_;
};

}  // namespace trnccl::api
