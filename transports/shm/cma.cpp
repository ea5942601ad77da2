#include "transports/shm/cma.hpp"

#include <sys/prctl.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/text_file.hpp"

namespace trnccl::shm {

const uint64_t* cmaProbeWord() {
  static const volatile uint64_t word = kCmaProbeValue;
  return const_cast<const uint64_t*>(&word);
}

std::string allowCmaReaders() {
  auto scope = readTextFile("/proc/sys/kernel/yama/ptrace_scope");  // absent: no Yama
  const int value = scope.isOk() ? std::atoi(scope.value().c_str()) : 0;
  if (value == 0) return "";
  if (value == 1 && prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0)
    return "Yama ptrace_scope=1: this process lets same-user processes read it (PR_SET_PTRACER)";
  return "Yama ptrace_scope=" + std::to_string(value) + " forbids it";
}

std::string probeCma(pid_t pid, uint64_t probeAddress) {
  uint64_t value = 0;
  iovec local{&value, sizeof(value)};
  iovec remote{reinterpret_cast<void*>(probeAddress), sizeof(value)};
  ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
  if (got < 0) return std::strerror(errno);
  if (got != sizeof(value) || value != kCmaProbeValue) return "the probe word read back wrong";
  return "";
}

Status cmaRead(pid_t pid, int peerRank, void* dst, uint64_t remoteAddress, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    iovec local{static_cast<char*>(dst) + done, bytes - done};
    iovec remote{reinterpret_cast<void*>(remoteAddress + done), bytes - done};
    ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      return makeError(Code::kSystemError,
                       "reading %zu bytes of rank %d's buffer (pid %d) with process_vm_readv "
                       "failed: %s; set TRNCCL_CMA=0 to copy through the shared-memory windows",
                       bytes - done, peerRank, static_cast<int>(pid),
                       got < 0 ? std::strerror(errno) : "no progress");
    done += static_cast<size_t>(got);
  }
  return Status::ok();
}

}  // namespace trnccl::shm
