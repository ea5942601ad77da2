// The thread that finishes calls nobody waits for on their own thread: calls whose future was
// asked for (DDP's comm hooks wait on the future, not on the Work) and calls whose Work was
// dropped before they ended (their tensors stay alive until then). One per process group,
// started at first use. It drives calls in the order they came, in bounded slices.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "pending_call.hpp"

namespace trnccl::torch_ext {

class Watcher {
 public:
  Watcher() = default;
  ~Watcher();  // finishes every adopted call (each ends by the communicator's timeout)
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  void adopt(std::shared_ptr<PendingCall> call);
  // Blocks until every adopted call has ended.
  void drain();

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<PendingCall>> calls_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace trnccl::torch_ext
