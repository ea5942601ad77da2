#include "core/liveness.hpp"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace trnccl {

ProcessWatch::~ProcessWatch() {
  for (const Entry& e : entries_)
    if (e.pidfd >= 0) ::close(e.pidfd);
}

void ProcessWatch::watch(int key, pid_t pid) {
  int fd = -1;
#ifdef SYS_pidfd_open
  fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#endif
  entries_.push_back({key, pid, fd});
}

static bool procSaysDead(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return true;
  std::string line;
  std::getline(in, line);
  size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  char state = line[close + 2];
  return state == 'Z' || state == 'X';
}

bool ProcessWatch::isDead(int key) const {
  for (const Entry& e : entries_) {
    if (e.key != key) continue;
    if (e.pidfd >= 0) {
      pollfd p{e.pidfd, POLLIN, 0};
      return ::poll(&p, 1, 0) > 0;
    }
    return procSaysDead(e.pid);
  }
  return false;
}

}  // namespace trnccl
