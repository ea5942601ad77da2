// How fast this machine moves freshly written data from one core to another: two processes,
// pinned to two CPUs, exchange 1 MiB messages through two shared rings of 16 x 64 KiB slots
// (the shape of trnccl's shm rings, but none of trnccl's code). Every byte a rank reads was
// written by the other core since its last read, so the figure is the cross-core copy speed
// that every copy-in/copy-out transfer pays.
//
// Why it exists: on the development VMs this speed changed by about 3x from one minute to the
// next (80 against 230 us per exchange, no other load), which moves every shared-memory
// figure above ~64 KiB with it, while Open MPI's single-copy timings, whose benchmark reads
// the same unchanged send buffer every iteration, moved much less. Run it before and after a
// benchmark to know which machine the figures came from (docs/PERFORMANCE.md).
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {

constexpr int kSlots = 16;
constexpr size_t kSlotBytes = 64 * 1024;
constexpr size_t kMessageBytes = kSlots * kSlotBytes;

struct alignas(64) Line {
  std::atomic<uint64_t> value;
};

// One direction. The slot sequence words sit apart from the payloads, so a waiting reader does
// not pull lines the writer is filling.
struct Ring {
  Line sequence[kSlots];
  Line tail;
  alignas(4096) char slots[kSlots][kSlotBytes];
};

bool pinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof(set), &set) == 0;
}

// Sends `iterations` messages on `out` while receiving as many on `in`, a slot at a time.
// False when the other side made no progress for 10 s (it died or cannot run).
bool exchange(Ring* out, Ring* in, const char* src, char* dst, int iterations, uint64_t* sent,
              uint64_t* received) {
  uint64_t idle = 0;
  auto stalledSince = std::chrono::steady_clock::now();
  for (int it = 0; it < iterations; ++it) {
    size_t sentBytes = 0, gotBytes = 0;
    while (sentBytes < kMessageBytes || gotBytes < kMessageBytes) {
      const uint64_t before = *sent + *received;
      if (sentBytes < kMessageBytes &&
          *sent - out->tail.value.load(std::memory_order_acquire) < kSlots) {
        const int s = static_cast<int>(*sent % kSlots);
        std::memcpy(out->slots[s], src + sentBytes, kSlotBytes);
        out->sequence[s].value.store(++*sent, std::memory_order_release);
        sentBytes += kSlotBytes;
      }
      const int r = static_cast<int>(*received % kSlots);
      if (gotBytes < kMessageBytes &&
          in->sequence[r].value.load(std::memory_order_acquire) == *received + 1) {
        std::memcpy(dst + gotBytes, in->slots[r], kSlotBytes);
        in->tail.value.store(++*received, std::memory_order_release);
        gotBytes += kSlotBytes;
      }
      if (*sent + *received != before) {
        idle = 0;
      } else if (++idle % (1u << 20) == 0) {
        const auto now = std::chrono::steady_clock::now();
        if (idle == (1u << 20)) stalledSince = now;
        if (now - stalledSince > std::chrono::seconds(10)) return false;
      }
    }
  }
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void usage() {
  std::printf(
      "usage: cross_core_probe [-n ITERS] [-R REPEATS] [-c CPU_A,CPU_B]\n"
      "  Two processes pinned to two CPUs exchange 1 MiB messages through shared rings of\n"
      "  16 x 64 KiB slots, both directions at once; prints the median time per exchange\n"
      "  over the repeats and the copy rate per core (each core copies 2 MiB per exchange).\n"
      "  -n ITERS     exchanges per repeat (default 200)\n"
      "  -R REPEATS   timed repeats (default 5)\n"
      "  -c A,B       the two CPUs (default 0,1)\n");
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 200, repeats = 5, cpuA = 0, cpuB = 1;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "cross_core_probe: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      usage();
      return 0;
    } else if (arg == "-n") {
      iterations = std::atoi(next());
    } else if (arg == "-R") {
      repeats = std::atoi(next());
    } else if (arg == "-c") {
      if (std::sscanf(next(), "%d,%d", &cpuA, &cpuB) != 2) {
        std::fprintf(stderr, "cross_core_probe: -c wants two CPUs, e.g. -c 0,1\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "cross_core_probe: unknown option %s (see --help)\n", arg.c_str());
      return 2;
    }
  }
  if (iterations < 1 || repeats < 1) {
    std::fprintf(stderr, "cross_core_probe: -n and -R must be at least 1\n");
    return 2;
  }
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || cpuA == cpuB || cpuA < 0 ||
      cpuB < 0 || cpuA >= CPU_SETSIZE || cpuB >= CPU_SETSIZE || !CPU_ISSET(cpuA, &allowed) ||
      !CPU_ISSET(cpuB, &allowed)) {
    std::fprintf(stderr,
                 "cross_core_probe: CPUs %d and %d must be two different CPUs this process may "
                 "run on (see taskset -p $$); choose them with -c A,B\n",
                 cpuA, cpuB);
    return 2;
  }
  void* shared = mmap(nullptr, 2 * sizeof(Ring) + sizeof(Line), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    std::perror("cross_core_probe: mmap");
    return 1;
  }
  Ring* rings = new (shared) Ring[2]();
  auto* gate = new (static_cast<char*>(shared) + 2 * sizeof(Ring)) Line{};
  const pid_t child = fork();
  if (child < 0) {
    std::perror("cross_core_probe: fork");
    return 1;
  }
  const int side = child == 0 ? 1 : 0;
  if (!pinTo(side == 0 ? cpuA : cpuB)) {
    std::fprintf(stderr, "cross_core_probe: cannot pin to CPU %d\n", side == 0 ? cpuA : cpuB);
    if (child == 0) _exit(1);
    kill(child, SIGKILL);
    return 1;
  }
  // Page-aligned like the slots: glibc 2.36's memcpy crawls on some AMD parts when the
  // destination lies 1-31 bytes past the source modulo a page (docs/PERFORMANCE.md), which
  // malloc's 16-byte header would cause here; this probe measures the cores, not that.
  auto* src = static_cast<char*>(
      mmap(nullptr, kMessageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  auto* dst = static_cast<char*>(
      mmap(nullptr, kMessageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (src == MAP_FAILED || dst == MAP_FAILED) {
    std::perror("cross_core_probe: mmap");
    if (child == 0) _exit(1);
    kill(child, SIGKILL);
    return 1;
  }
  std::memset(src, side + 1, kMessageBytes);
  std::memset(dst, 0, kMessageBytes);
  uint64_t sent = 0, received = 0;
  std::vector<double> usPerExchange;
  for (int r = 0; r <= repeats; ++r) {  // round 0 warms up
    // Both sides start each repeat together (a two-party barrier on a counter).
    gate->value.fetch_add(1, std::memory_order_acq_rel);
    const auto giveUp = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (gate->value.load(std::memory_order_acquire) < static_cast<uint64_t>(2 * (r + 1))) {
      if (std::chrono::steady_clock::now() > giveUp) {
        std::fprintf(stderr,
                     "cross_core_probe: the other process did not start repeat %d "
                     "within 10 s (did it fail to start?)\n",
                     r);
        if (child == 0) _exit(1);
        kill(child, SIGKILL);
        return 1;
      }
    }
    auto t0 = std::chrono::steady_clock::now();
    if (!exchange(&rings[side], &rings[1 - side], src, dst, r == 0 ? 10 : iterations, &sent,
                  &received)) {
      std::fprintf(stderr, "cross_core_probe: the other process stopped exchanging for 10 s\n");
      if (child == 0) _exit(1);
      kill(child, SIGKILL);
      return 1;
    }
    std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - t0;
    if (r > 0) usPerExchange.push_back(took.count() / iterations);
  }
  if (dst[0] != static_cast<char>(2 - side) ||
      dst[kMessageBytes - 1] != static_cast<char>(2 - side)) {
    std::fprintf(stderr, "cross_core_probe: side %d received the wrong bytes\n", side);
    if (child == 0) _exit(1);
    return 1;
  }
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  const double us = median(usPerExchange);
  std::printf(
      "cross-core exchange, CPUs %d and %d: %.1f us per 1 MiB each way (median of %d x "
      "%d; range %.1f-%.1f), %.1f GB/s copied per core\n",
      cpuA, cpuB, us, repeats, iterations,
      *std::min_element(usPerExchange.begin(), usPerExchange.end()),
      *std::max_element(usPerExchange.begin(), usPerExchange.end()),
      2.0 * kMessageBytes / us / 1e3);
  return 0;
}
