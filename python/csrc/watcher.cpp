#include "watcher.hpp"

#include "gil.hpp"

namespace trnccl::torch_ext {

Watcher::~Watcher() {
  WithoutGil noGil;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watcher::adopt(std::shared_ptr<PendingCall> call) {
  if (call->completed()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& queued : calls_)
      if (queued == call) return;
    calls_.push_back(std::move(call));
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  changed_.notify_all();
}

void Watcher::drain() {
  WithoutGil noGil;
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return calls_.empty(); });
}

void Watcher::run() {
  for (;;) {
    std::shared_ptr<PendingCall> call;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !calls_.empty(); });
      if (calls_.empty()) return;  // stopping, nothing left
      call = calls_.front();
    }
    // Each call ends by the communicator's timeout; a stop only comes after drain().
    if (!call->driveFor(PendingCall::kNoLimit)) continue;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      calls_.pop_front();  // `call` still holds it: it is freed below, outside the lock
    }
    changed_.notify_all();
    call.reset();
  }
}

}  // namespace trnccl::torch_ext
