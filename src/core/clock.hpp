// Monotonic time and deadlines used by every bounded wait.
#pragma once

#include <chrono>
#include <cstdint>

namespace trnccl {

using Clock = std::chrono::steady_clock;

inline int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

class Deadline {
 public:
  static Deadline after(double seconds) {
    Deadline d;
    d.endNs_ = nowNs() + static_cast<int64_t>(seconds * 1e9);
    return d;
  }
  bool expired() const { return nowNs() >= endNs_; }
  // Milliseconds left, clamped to [0, INT32_MAX] for poll().
  int remainingMs() const {
    int64_t left = (endNs_ - nowNs()) / 1000000;
    if (left < 0) return 0;
    if (left > 0x7FFFFFFF) return 0x7FFFFFFF;
    return static_cast<int>(left);
  }
  int64_t endNs() const { return endNs_; }

 private:
  int64_t endNs_ = 0;
};

}  // namespace trnccl
