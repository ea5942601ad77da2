// Sleeping on a 32-bit word in memory that other processes map (futex(2), shared form): the
// wait policy's last phase, after spinning and yielding (Communicator::wait).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <ctime>

namespace trnccl {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "a futex word is 32 bits");

// Sleeps while *word == expected, for at most timeoutNs (spurious wakes are possible: the
// caller re-checks what it waits for).
inline void futexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeoutNs) {
  timespec timeout{static_cast<time_t>(timeoutNs / 1'000'000'000),
                   static_cast<long>(timeoutNs % 1'000'000'000)};
  (void)syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &timeout,
                nullptr, 0);
}

inline void futexWakeAll(std::atomic<uint32_t>* word) {
  (void)syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr,
                nullptr, 0);
}

}  // namespace trnccl
