// What waiting costs: the CPU time of a rank blocked on a late peer, how soon it returns once
// the peer arrives, and the 8 B all-reduce latency, for the spinning policy
// (TRNCCL_SPIN_TIME_US=-1) and the sleeping one (the spin time given, default the library's;
// over efa TRNCCL_EFA_SLEEP=1, the default, against 0 in the spinning row) side by side in
// one run, over shm and over efa (tcp;ofi_rxm on loopback). Each (transport, policy) gets its
// own communicator, split from the launch one after setting the variables, and the repeats
// interleave the policies.
//   trnccl-run -np 2 wait_perf [-l SECONDS] [-R REPEATS] [-s SPIN_US] [-t shm,efa] [-n ITERS]
#include <getopt.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.hpp"  // steady clock: CLOCK_MONOTONIC, one clock for both ranks
#include "perf/launch.hpp"
#include "trnccl.h"

namespace {

using trnccl::bench::Launch;

struct Options {
  double lateSeconds = 2.0;
  int repeats = 3;
  int iters = 2000;
  std::string sleepSpinUs;  // "" = the library's default
  std::vector<std::string> transports = {"shm", "efa"};
};

void usage() {
  std::printf(
      "usage: wait_perf [options]   (start it with trnccl-run -np 2 wait_perf ...)\n"
      "  -l, --late SECONDS   how late rank 1 joins the blocked all-reduce (default 2)\n"
      "  -R, --repeats N      repeats, the policies interleaved (default 3); medians and ranges\n"
      "  -s, --spin_us US     TRNCCL_SPIN_TIME_US of the sleeping policy (default: the\n"
      "                       library's default)\n"
      "  -t, --transports L   comma list of shm, efa (default shm,efa)\n"
      "  -n, --iters N        8 B all-reduces timed per repeat for the latency (default 2000)\n"
      "  -h, --help           this text\n"
      "Columns: cpu_s = CPU time (user + system, the whole process) of rank 0 while blocked;\n"
      "wake_us = from rank 1's arrival to rank 0's return; lat_us = 8 B all-reduce median.\n");
}

bool parse(int argc, char** argv, Options* o) {
  static const option longOptions[] = {{"late", required_argument, nullptr, 'l'},
                                       {"repeats", required_argument, nullptr, 'R'},
                                       {"spin_us", required_argument, nullptr, 's'},
                                       {"transports", required_argument, nullptr, 't'},
                                       {"iters", required_argument, nullptr, 'n'},
                                       {"help", no_argument, nullptr, 'h'},
                                       {nullptr, 0, nullptr, 0}};
  for (int c; (c = getopt_long(argc, argv, "l:R:s:t:n:h", longOptions, nullptr)) != -1;) {
    switch (c) {
      case 'l': o->lateSeconds = std::atof(optarg); break;
      case 'R': o->repeats = std::atoi(optarg); break;
      case 's': o->sleepSpinUs = optarg; break;
      case 'n': o->iters = std::atoi(optarg); break;
      case 't': {
        o->transports.clear();
        std::stringstream list(optarg);
        for (std::string t; std::getline(list, t, ',');) {
          if (t != "shm" && t != "efa") {
            std::fprintf(stderr, "wait_perf: -t takes shm and efa, not '%s'\n", t.c_str());
            return false;
          }
          o->transports.push_back(t);
        }
        break;
      }
      case 'h': usage(); return false;
      default: usage(); return false;
    }
  }
  if (o->lateSeconds < 0 || o->repeats < 1 || o->iters < 1 || o->transports.empty()) {
    std::fprintf(stderr, "wait_perf: -l >= 0, -R >= 1, -n >= 1 and one transport at least\n");
    return false;
  }
  return true;
}

double processCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

struct Sample {
  double cpuSeconds = 0, wakeUs = 0, latencyUs = 0;
};

// One measurement on comm; false (message printed) when a call failed.
bool measure(trncclComm_t comm, int rank, const Options& o, Sample* s) {
  // Blocked: rank 1 arrives late and carries its arrival time in the all-reduce.
  if (trncclBarrier(comm) != trncclSuccess) return false;
  if (rank == 1) std::this_thread::sleep_for(std::chrono::duration<double>(o.lateSeconds));
  int64_t arrival = rank == 1 ? trnccl::nowNs() : 0;
  const double cpu0 = processCpuSeconds();
  if (trncclAllReduce(&arrival, &arrival, 1, trncclInt64, trncclSum, comm) != trncclSuccess)
    return false;
  s->wakeUs = (trnccl::nowNs() - arrival) / 1e3;
  s->cpuSeconds = processCpuSeconds() - cpu0;
  // Latency: both ranks in step; the median of single-call times.
  std::vector<double> times;
  int64_t x = 1;
  for (int i = 0; i < o.iters + 50; ++i) {
    const int64_t t0 = trnccl::nowNs();
    if (trncclAllReduce(&x, &x, 1, trncclInt64, trncclMax, comm) != trncclSuccess) return false;
    if (i >= 50) times.push_back((trnccl::nowNs() - t0) / 1e3);
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  s->latencyUs = times[times.size() / 2];
  return true;
}

struct Range {
  double median, lo, hi;
};
Range rangeOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  Launch launch;
  if (!trnccl::bench::discoverLaunch("wait_perf", &launch)) return 2;
  Options o;
  if (!parse(argc, argv, &o)) {
    trnccl::bench::finishLaunch(launch);
    return 2;
  }
  const int rank = launch.rank;
  if (launch.nranks != 2) {
    if (rank == 0) std::fprintf(stderr, "wait_perf: run it with 2 ranks (trnccl-run -np 2)\n");
    trnccl::bench::finishLaunch(launch);
    return 2;
  }
  setenv("FI_TCP_IFACE", "lo", 1);  // loopback only
  trncclComm_t world = nullptr;
  if (trncclCommInitRank(&world, 2, launch.id, rank) != trncclSuccess) {
    std::fprintf(stderr, "rank %d: %s\n", rank, trncclGetLastError(nullptr));
    trnccl::bench::finishLaunch(launch);
    return 1;
  }
  const std::vector<std::string> policies = {"spin", "sleep"};
  if (rank == 0) {
    std::printf(
        "# wait_perf: 2 ranks, rank 1 %.1f s late, %d repeats (median [min-max]), "
        "sleeping policy TRNCCL_SPIN_TIME_US=%s\n",
        o.lateSeconds, o.repeats, o.sleepSpinUs.empty() ? "default" : o.sleepSpinUs.c_str());
    std::printf("#%9s %7s %24s %8s %26s %22s\n", "transport", "policy", "cpu_s", "cpu_%", "wake_us",
                "lat_us");
  }
  int failed = 0;
  for (const std::string& transport : o.transports) {
    std::vector<std::vector<Sample>> samples(policies.size());
    for (int r = 0; r < o.repeats && !failed; ++r) {
      for (size_t p = 0; p < policies.size() && !failed; ++p) {
        if (policies[p] == "spin")
          setenv("TRNCCL_SPIN_TIME_US", "-1", 1);
        else if (o.sleepSpinUs.empty())
          unsetenv("TRNCCL_SPIN_TIME_US");
        else
          setenv("TRNCCL_SPIN_TIME_US", o.sleepSpinUs.c_str(), 1);
        if (transport == "efa") {
          setenv("TRNCCL_TRANSPORT", "efa", 1);
          setenv("TRNCCL_FI_PROVIDER", "tcp;ofi_rxm", 1);
          // The sleep row is the default (sleeping on the network); spin yields instead.
          setenv("TRNCCL_EFA_SLEEP", policies[p] == "spin" ? "0" : "1", 1);
        } else {
          unsetenv("TRNCCL_TRANSPORT");
        }
        trncclComm_t comm = nullptr;
        Sample s;
        if (trncclCommSplit(world, 0, rank, &comm, nullptr) != trncclSuccess ||
            !measure(comm, rank, o, &s)) {
          std::fprintf(stderr, "rank %d %s/%s: %s\n", rank, transport.c_str(), policies[p].c_str(),
                       trncclGetLastError(nullptr));
          failed = 1;
        }
        if (comm) trncclCommDestroy(comm);
        samples[p].push_back(s);
      }
    }
    if (rank != 0 || failed) continue;
    for (size_t p = 0; p < policies.size(); ++p) {
      std::vector<double> cpu, wake, lat;
      for (const Sample& s : samples[p]) {
        cpu.push_back(s.cpuSeconds);
        wake.push_back(s.wakeUs);
        lat.push_back(s.latencyUs);
      }
      Range c = rangeOf(cpu), w = rangeOf(wake), l = rangeOf(lat);
      std::printf(" %9s %7s %6.3f [%6.3f-%6.3f] %8.1f %8.1f [%7.1f-%7.1f] %6.2f [%5.2f-%5.2f]\n",
                  transport.c_str(), policies[p].c_str(), c.median, c.lo, c.hi,
                  100.0 * c.median / std::max(1e-9, o.lateSeconds), w.median, w.lo, w.hi, l.median,
                  l.lo, l.hi);
    }
    std::fflush(stdout);
  }
  trncclCommDestroy(world);
  trnccl::bench::finishLaunch(launch);
  return failed;
}
