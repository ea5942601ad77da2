// Watches processes of peer ranks on this host, so that a rank waiting on a dead peer returns
// an error at once instead of running into its timeout. Uses pidfds where the kernel has them
// (a pidfd becomes readable when the process exits, even while it is an unreaped zombie),
// else /proc/<pid>/stat.
#pragma once

#include <sys/types.h>

#include <vector>

namespace trnccl {

class ProcessWatch {
 public:
  ProcessWatch() = default;
  ~ProcessWatch();
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

  // key identifies the process to the caller (a rank); returned by firstDead().
  void watch(int key, pid_t pid);
  // True when the process watched under key has exited (false for unknown keys).
  bool isDead(int key) const;

 private:
  struct Entry {
    int key;
    pid_t pid;
    int pidfd;
  };
  std::vector<Entry> entries_;
};

}  // namespace trnccl
