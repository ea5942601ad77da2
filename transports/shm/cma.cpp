#include "transports/shm/cma.hpp"

#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/clock.hpp"
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

namespace {

double timeKernelCopy() {
  constexpr size_t kBytes = 1 << 20;
  void* mapped = mmap(nullptr, 2 * kBytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (mapped == MAP_FAILED) return 0;
  char* src = static_cast<char*>(mapped);
  char* dst = src + kBytes;  // page-aligned both: no distance for rep movsb to crawl at
  std::memset(src, 1, kBytes);
  int64_t kernelNs = INT64_MAX, userNs = INT64_MAX;
  bool failed = false;
  for (int i = 0; i < 3 && !failed; ++i) {
    iovec local{dst, kBytes}, remote{src, kBytes};
    const int64_t t0 = nowNs();
    failed = process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != static_cast<ssize_t>(kBytes);
    const int64_t t1 = nowNs();
    std::memcpy(dst, src, kBytes);
    const int64_t t2 = nowNs();
    kernelNs = std::min(kernelNs, t1 - t0);
    userNs = std::min(userNs, t2 - t1);
  }
  munmap(mapped, 2 * kBytes);
  if (failed || userNs <= 0) return 0;
  return static_cast<double>(kernelNs) / static_cast<double>(userNs);
}

}  // namespace

// How many times memcpy's time the kernel's copy may take before large blocks (and every
// broadcast block) take the windows instead (cmaMaxBytes, broadcastCmaMaxBytes).
constexpr double kSlowdownLimit = 2.0;

// A property of the machine: timed once per process, not at every communicator's init.
double kernelCopySlowdown() {
  static const double slowdown = timeKernelCopy();
  return slowdown;
}

// The windows copy each byte twice in user space (into a window, out of it), CMA once in the
// kernel. Where the kernel's copy takes more than twice as long as memcpy, blocks whose copy
// out of the windows streams (TRNCCL_STREAM_COPY_BYTES) are cheaper through the windows, and
// with more ranks than cores every block is (the last wait for all readers costs scheduling
// rounds). Measured on an AMD EPYC VM where the kernel's copy took 2.7x memcpy's time at 1 MiB
// (3.2x at 32 MiB), TRNCCL_CMA=0 against 1, 3 interleaved runs: 2 ranks, 16-64 MiB, windows
// 1.1-1.75x faster; 0.5-2 MiB blocks up to 1.5x faster by CMA; 4 ranks on 2 cores, windows
// faster or level at every size that used CMA (up to 2.4x at 64 MiB). On an Intel VM
// (2026-12-04, the kernel's copy not timed) CMA had won at 16 MiB; where the kernel copies
// within twice memcpy's time, nothing changes.
uint64_t cmaMaxBytes(uint64_t explicitMaxBytes, double kernelSlowdown, uint64_t streamCopyBytes,
                     bool oversubscribed) {
  if (explicitMaxBytes) return explicitMaxBytes;
  if (kernelSlowdown <= kSlowdownLimit) return UINT64_MAX;
  if (oversubscribed) return 0;
  return streamCopyBytes ? streamCopyBytes : UINT64_MAX;
}

// Session 28 exempted all-gather and all-to-all from that limit: on 2 ranks of the same VM, 6
// alternating rounds with Open MPI beside (16 and 64 MiB), their windows swung between 0.72x and
// 1.98x Open MPI's time with the machine's cross-core speed while CMA held 1.10-1.29x. Session 31,
// in the machine's fast state (cross_core_probe 69-75 us per MiB), measured the reverse in every
// round: 3 rounds at 64 MiB, windows 4.6-4.8 ms (all-gather, 1.78-1.99x Open MPI) and 5.6-6.9 ms
// (all-to-all, 1.14-1.35x) against CMA's 7.7-10.2 and 8.8-10.0 ms (0.97-1.07x). Which wins
// depends on the minute; the rule above, which follows the one thing init can time, applies to
// them again.

// A broadcast's readers each make the root's whole buffer's copy; by CMA that is the kernel's
// copy on every reader and a last wait that keeps the root until all have read, through the
// windows the root stages once and the readers memcpy while it stages the next round. Session
// 31 on the AMD EPYC VM (the kernel's copy 2.3-2.8x memcpy's time), 2 ranks, direct broadcast,
// TRNCCL_CMA=1 against 0, 2 alternating rounds: 64 KiB 7.9-8.3 against 3.7-4.0 us, 256 KiB
// 14.6-17.4 against 12.1-12.7, 1 MiB 81-84 against 51-56, 4 MiB 310-312 against 226-230 (and
// session 28: 64 MiB 14.2-14.7 against 9.7-10.3 ms). So where the kernel's copy is that slow,
// broadcast never reads by CMA; a band set by hand (not timed) still applies.
uint64_t broadcastCmaMaxBytes(uint64_t cmaMaxBytes, uint64_t kernelCopyPermille) {
  return static_cast<double>(kernelCopyPermille) / 1000 > kSlowdownLimit ? 0 : cmaMaxBytes;
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

namespace {
std::atomic<uint64_t> kernelReadBytes{0};
}  // namespace

uint64_t cmaKernelReadBytes() {
  return kernelReadBytes.load(std::memory_order_relaxed);
}

Status cmaRead(pid_t pid, int peerRank, void* dst, uint64_t remoteAddress, size_t bytes) {
  kernelReadBytes.fetch_add(bytes, std::memory_order_relaxed);
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
