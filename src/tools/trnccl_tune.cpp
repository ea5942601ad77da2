// trnccl-tune: measures the cost model's numbers on this machine with real transfers and writes
// a tuning file (docs/PLANNER.md) for TRNCCL_TUNING_FILE. Run on two ranks:
//   trnccl-run -np 2 trnccl-tune -o host.tuning
// For each link class it can set up here (shm; efa over the libfabric provider trnccl picks;
// neuronlink emulated over the trn2.48xlarge preset's linked chips 0 and 1) it splits a
// communicator whose only transport between the two ranks is that class, checks with the
// traffic counters that the class carried the messages, and times exchanges (both ranks send
// and receive at once, as in a collective's rounds): alpha is the time of an 8 B exchange, the
// bandwidth the slope between 1 and 4 MiB. step_us is one 8 B
// all-reduce on a one-rank communicator (the software path of a call), sync_us one barrier of
// the shared-window protocol, copy_gbps and reduce_gbps the library's own copy and
// two-source float reduction over 4 MiB in this process. Medians of repeated timings.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "collectives/cost_model.hpp"
#include "core/copy.hpp"
#include "core/reduce.hpp"
#include "core/strformat.hpp"
#include "core/text_file.hpp"
#include "tools/tune_moe.hpp"
#include "trnccl.h"

using namespace trnccl;

namespace {

const char* kUsage =
    "usage: trnccl-run -np 2 trnccl-tune [-o FILE] [--quick]\n"
    "\n"
    "Measures this machine's latencies and bandwidths per link class (shm, efa over the\n"
    "libfabric provider trnccl picks, neuronlink emulated over shm) with real transfers between\n"
    "the two ranks, and the host's copy and reduction speeds, and writes them as a tuning file\n"
    "(docs/PLANNER.md) that TRNCCL_TUNING_FILE and trnccl-topo --tuning read. A class that\n"
    "cannot be set up here keeps its default and the file says so.\n"
    "  -o FILE   where rank 0 writes the file (default: standard output)\n"
    "  --quick   fewer repetitions (a smoke test; the numbers are noisier)\n"
    "  --moe     instead, the MoE engine's mode per batch size on any number of ranks (see\n"
    "            trnccl-tune --moe --help)\n"
    "libfabric's tcp provider must stay on loopback: set FI_TCP_IFACE=lo (and FI_NET_IFACE=lo).\n";

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Job {
  int rank = 0, nranks = 0;
  trncclComm_t world = nullptr;
  int repeats = 7;
};

bool check(trncclResult_t rc, const Job& job, const char* what, trncclComm_t comm) {
  if (rc == trncclSuccess) return true;
  std::fprintf(stderr, "trnccl-tune rank %d: %s: %s\n", job.rank, what, trncclGetLastError(comm));
  return false;
}

// Time of a message of `bytes` between ranks 0 and 1 while the other direction carries one
// too (both send and receive at once, as in every round of a ring or an exchange): median of
// job.repeats timings of `iterations` exchanges each. A ping-pong on idle cores would
// measure the link faster than collectives see it.
double exchangeUs(const Job& job, trncclComm_t comm, size_t bytes, int iterations, bool* ok) {
  std::vector<char> out(std::max<size_t>(bytes, 1)), in(out.size());
  const int peer = 1 - job.rank;
  std::vector<double> samples;
  for (int rep = -1; rep < job.repeats; ++rep) {  // rep -1 warms up
    if (!check(trncclBarrier(comm), job, "barrier", comm)) return *ok = false, 0;
    auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) {
      trncclGroupStart();
      trncclSend(out.data(), bytes, trncclUint8, peer, comm);
      trncclRecv(in.data(), bytes, trncclUint8, peer, comm);
      if (!check(trncclGroupEnd(), job, "exchange", comm)) return *ok = false, 0;
    }
    if (rep >= 0) samples.push_back(secondsSince(start) * 1e6 / iterations);
  }
  // Both ranks use rank 0's figure (one number in the file).
  double mine = median(samples);
  double agreed = 0;
  if (!check(trncclBroadcast(&mine, &agreed, 1, trncclFloat64, 0, comm), job, "broadcast", comm))
    return *ok = false, 0;
  return agreed;
}

// Environment for one measurement, set alike on both ranks and restored afterwards.
struct ScopedEnv {
  std::vector<std::pair<std::string, std::string>> saved;  // name, old value ("\x01" = unset)
  void set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved.emplace_back(name, old ? old : "\x01");
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      if (it->second == "\x01")
        unsetenv(it->first.c_str());
      else
        setenv(it->first.c_str(), it->second.c_str(), 1);
    }
  }
};

struct ClassSetup {
  topology::LinkClass link;
  trncclTransport_t transport;
  const char* transportList;  // TRNCCL_TRANSPORT
  const char* preset;         // TRNCCL_TOPO_PRESET
};

// Measures one class; returns false (and leaves `cost` alone) when it cannot be set up here.
bool measureClass(const Job& job, const ClassSetup& setup, LinkCost* cost, std::string* note) {
  ScopedEnv env;
  env.set("TRNCCL_TRANSPORT", setup.transportList);
  env.set("TRNCCL_TOPO_PRESET", setup.preset);
  env.set("TRNCCL_TOPO_FILE", nullptr);
  env.set("TRNCCL_HOSTID", nullptr);
  env.set("TRNCCL_NEURON_DEVICES", nullptr);
  trncclComm_t comm = nullptr;
  trncclConfig_t config = TRNCCL_CONFIG_INITIALIZER;
  config.commName = "trnccl-tune";
  if (trncclCommSplit(job.world, 0, job.rank, &comm, &config) != trncclSuccess) {
    *note = strformat("not measured (%s)", trncclGetLastError(job.world));
    return false;
  }
  bool ok = true;
  const double alpha = exchangeUs(job, comm, 8, 200, &ok);
  const double small = ok ? exchangeUs(job, comm, 1 << 20, 10, &ok) : 0;
  const double large = ok ? exchangeUs(job, comm, 4 << 20, 4, &ok) : 0;
  // The traffic counters say which transport carried the messages to the peer.
  trncclPeerTraffic_t traffic[2] = {};
  int count = 0;
  if (ok && trncclCommGetPeerTraffic(comm, traffic, 2, &count) == trncclSuccess) {
    const trncclPeerTraffic_t& toPeer = traffic[1 - job.rank];
    if (toPeer.transport != setup.transport || toPeer.sentBytes == 0) {
      *note = strformat("not measured (the peer was reached over transport %d, not %s)",
                        static_cast<int>(toPeer.transport), topology::linkClassName(setup.link));
      ok = false;
    }
  }
  trncclCommDestroy(comm);
  if (!ok) return false;
  const double slopeUs = large - small;  // 3 MiB more
  cost->alphaUs = alpha;
  cost->gbps = slopeUs > 0 ? (3 << 20) / slopeUs / 1e3 : cost->gbps;
  *note = strformat("8 B exchange %.2f us; 1 MiB %.1f us, 4 MiB %.1f us", alpha, small, large);
  return true;
}

// The software path of one call: an 8 B all-reduce on a communicator of this rank alone.
double stepUs(const Job& job, bool* ok) {
  trncclComm_t self = nullptr;
  if (!check(trncclCommSplit(job.world, job.rank, 0, &self, nullptr), job, "split", job.world))
    return *ok = false, 0;
  double value = 1, out = 0;
  std::vector<double> samples;
  for (int rep = -1; rep < job.repeats; ++rep) {
    auto start = Clock::now();
    for (int i = 0; i < 1000; ++i)
      if (!check(trncclAllReduce(&value, &out, 1, trncclFloat64, trncclSum, self), job,
                 "all-reduce", self))
        return *ok = false, 0;
    if (rep >= 0) samples.push_back(secondsSince(start) * 1e6 / 1000);
  }
  trncclCommDestroy(self);
  return median(samples);
}

// One barrier of the shared-window protocol between the two ranks.
double syncUs(const Job& job, bool* ok) {
  trncclComm_t comm = nullptr;
  trncclConfig_t config = TRNCCL_CONFIG_INITIALIZER;
  config.algorithm = "direct";
  ScopedEnv env;
  env.set("TRNCCL_TRANSPORT", nullptr);
  env.set("TRNCCL_TOPO_PRESET", nullptr);
  if (!check(trncclCommSplit(job.world, 0, job.rank, &comm, &config), job, "split", job.world))
    return *ok = false, 0;
  std::vector<double> samples;
  for (int rep = -1; rep < job.repeats; ++rep) {
    auto start = Clock::now();
    for (int i = 0; i < 1000; ++i)
      if (!check(trncclBarrier(comm), job, "barrier", comm)) return *ok = false, 0;
    if (rep >= 0) samples.push_back(secondsSince(start) * 1e6 / 1000);
  }
  trncclCommDestroy(comm);
  return median(samples);
}

// The library's own copy and two-source float reduction, 4 MiB (the shared windows' scale).
void hostSpeeds(const Job& job, double* copyGBps, double* reduceGBps) {
  const size_t bytes = 4 << 20, count = bytes / sizeof(float);
  std::vector<float> a(count, 1.0f), b(count, 2.0f), dst(count);
  std::vector<double> copies, reductions;
  for (int rep = -1; rep < job.repeats; ++rep) {
    auto start = Clock::now();
    for (int i = 0; i < 8; ++i) copyBytes(dst.data(), a.data(), bytes, CopyKind::kCached);
    if (rep >= 0) copies.push_back(8.0 * bytes / secondsSince(start) / 1e9);
    const void* srcs[2] = {a.data(), b.data()};
    start = Clock::now();
    for (int i = 0; i < 8; ++i) reduce({trncclFloat32, trncclSum, dst.data(), srcs, 2, count, 0});
    if (rep >= 0) reductions.push_back(8.0 * bytes / secondsSince(start) / 1e9);
  }
  *copyGBps = median(copies);
  *reduceGBps = median(reductions);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--moe") == 0) return tools::tuneMoe(argc, argv);
  std::string output;
  Job job;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::printf("%s", kUsage);
      return 0;
    } else if (arg == "-o" && i + 1 < argc) {
      output = argv[++i];
    } else if (arg == "--quick") {
      job.repeats = 3;
    } else {
      std::fprintf(stderr, "trnccl-tune: unknown argument '%s'\n%s", arg.c_str(), kUsage);
      return 2;
    }
  }
  trncclUniqueId id;
  if (trncclGetLaunchInfo(&job.rank, &job.nranks, &id) != trncclSuccess) {
    std::fprintf(stderr, "trnccl-tune: %s\n%s", trncclGetLastError(nullptr), kUsage);
    return 2;
  }
  if (job.nranks != 2) {
    std::fprintf(stderr, "trnccl-tune: run it on exactly 2 ranks (trnccl-run -np 2), not %d\n",
                 job.nranks);
    return 2;
  }
  if (!check(trncclCommInitRank(&job.world, job.nranks, id, job.rank), job, "init", nullptr))
    return 1;

  CostParams costs = machineCosts();
  std::vector<std::string> notes;
  const ClassSetup classes[] = {
      {topology::LinkClass::kShm, trncclTransportShm, "shm", nullptr},
      {topology::LinkClass::kEfa, trncclTransportEfa, "efa", nullptr},
      {topology::LinkClass::kNeuronLink, trncclTransportNeuronLink, nullptr, "trn2.48xlarge"},
  };
  for (const ClassSetup& setup : classes) {
    std::string note;
    measureClass(job, setup, &costs.of(setup.link), &note);
    notes.push_back(strformat("%s: %s", topology::linkClassName(setup.link), note.c_str()));
  }
  bool ok = true;
  costs.stepUs = stepUs(job, &ok);
  if (ok) costs.syncUs = syncUs(job, &ok);
  hostSpeeds(job, &costs.copyGBps, &costs.reduceGBps);
  trncclCommDestroy(job.world);
  if (!ok) return 1;
  if (job.rank != 0) return 0;  // rank 0's own figures for what each rank measured alone
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::string text = tuningText(costs);
  std::string header = strformat("# measured by trnccl-tune on %s, %s (2 ranks)\n", host, date);
  for (const std::string& note : notes) header += "# " + note + "\n";
  header += strformat(
      "# step_us: 8 B all-reduce on one rank; sync_us: a direct barrier; "
      "copy_gbps / reduce_gbps: 4 MiB in one process; slice_us: the default, not measured "
      "(it needs ranks on several nodes)\n");
  // The header line must come first; comments go after it.
  const size_t firstLine = text.find('\n') + 1;
  text = text.substr(0, firstLine) + header + text.substr(firstLine);
  if (output.empty()) {
    std::printf("%s", text.c_str());
    return 0;
  }
  if (Status written = writeTextFile(output, text); !written.isOk()) {
    std::fprintf(stderr, "trnccl-tune: %s\n", written.message().c_str());
    return 1;
  }
  std::printf("trnccl-tune: wrote %s\n%s", output.c_str(), text.c_str());
  return 0;
}
