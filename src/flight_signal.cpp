#include "flight_signal.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <mutex>
#include <set>
#include <thread>

#include "comm.hpp"
#include "core/log.hpp"

namespace trnccl {

namespace {

struct Registry {
  std::mutex mutex;
  std::set<Communicator*> comms;
  std::string dir;
  bool installed = false;
  int pipe[2] = {-1, -1};
};

Registry* current = nullptr;

Registry& registry() {
  static std::once_flag once;
  std::call_once(once, [] {
    current = new Registry();  // never destroyed: the dump thread outlives main
    // A forked child has no dump thread: it starts afresh (the parent's lock may be held).
    pthread_atfork(nullptr, nullptr, [] { current = new Registry(); });
  });
  return *current;
}

void onSignal(int) {
  const int saved = errno;
  const char byte = 1;
  if (current && current->pipe[1] >= 0) {
    [[maybe_unused]] ssize_t n = write(current->pipe[1], &byte, 1);  // async-signal-safe
  }
  errno = saved;
}

void dumpLoop() {
  Registry& r = registry();
  const int fd = r.pipe[0];
  char byte;
  while (read(fd, &byte, 1) == 1) {
    std::lock_guard<std::mutex> lock(r.mutex);
    for (Communicator* comm : r.comms) {
      Status dumped = comm->dumpFlightRecorder(r.dir, "SIGUSR2");
      if (!dumped.isOk()) TRNCCL_WARN(log::kColl, "%s", dumped.message().c_str());
    }
  }
}

// Once per process: the pipe, the thread, and the handler unless the program has its own.
void installLocked(Registry& r) {
  r.installed = true;
  struct sigaction existing {};
  // Ours already when a forked child of a process that installed it starts again.
  if (sigaction(SIGUSR2, nullptr, &existing) != 0 ||
      (existing.sa_handler != SIG_DFL && existing.sa_handler != onSignal)) {
    TRNCCL_INFO(log::kInit,
                "SIGUSR2 has a handler already: flight recorder dumps only on "
                "failure and trncclCommDumpFlightRecorder");
    return;
  }
  if (::pipe2(r.pipe, O_CLOEXEC) != 0) return;
  std::thread(dumpLoop).detach();
  struct sigaction action {};
  action.sa_handler = onSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &action, nullptr);
}

}  // namespace

void registerForSignalDumps(Communicator* comm, const std::string& dir) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.dir.empty()) r.dir = dir;
  if (!r.installed) installLocked(r);
  r.comms.insert(comm);
}

void unregisterFromSignalDumps(Communicator* comm) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.comms.erase(comm);
}

}  // namespace trnccl
