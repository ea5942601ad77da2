#include "tools/tune_links.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>

#include "api/handles.hpp"
#include "core/copy.hpp"
#include "core/env.hpp"
#include "core/reduce.hpp"
#include "core/strformat.hpp"

namespace trnccl::tools {

namespace {

using Clock = std::chrono::steady_clock;
using topology::LinkClass;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

bool check(trncclResult_t rc, const TuneJob& job, const char* what, trncclComm_t comm) {
  if (rc == trncclSuccess) return true;
  std::fprintf(stderr, "trnccl-tune rank %d: %s: %s\n", job.rank, what, trncclGetLastError(comm));
  return false;
}

// What makes one link class carry a probe's ring: TRNCCL_TRANSPORT, TRNCCL_TOPO_PRESET and
// TRNCCL_HOSTID as set while it is created (nullptr: unset; hostId nullptr: left alone).
struct LinkSetup {
  LinkClass link;
  trncclTransport_t transport;
  const char* transportList;
  const char* preset;
  const char* hostId;
};

// Sets the environment for a probe of that class, alike on every rank, until *env ends.
void setFor(const LinkSetup& setup, env::ScopedOverride* env) {
  env->set(env::kTransport, setup.transportList);
  env->set(env::kTopoPreset, setup.preset);
  env->set(env::kTopoFile, nullptr);
  env->set(env::kNeuronDevices, nullptr);
  if (setup.hostId) env->set(env::kHostId, setup.hostId);
}

// A communicator of some of the job's ranks with one algorithm forced, and its shape as the
// planner prices it.
struct Probe {
  trncclComm_t comm = nullptr;
  int rank = 0, nranks = 1;
  PlanShape shape;
  Probe() = default;
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;
  ~Probe() {
    if (comm) trncclCommDestroy(comm);
  }
};

// Every rank of the job calls it (a split is collective); ranks of one color form one probe.
bool openProbe(const TuneJob& job, int color, const char* algorithm, Probe* probe,
               std::string* why) {
  trncclConfig_t config = TRNCCL_CONFIG_INITIALIZER;
  config.commName = "trnccl-tune";
  config.algorithm = algorithm;
  if (trncclCommSplit(job.world, color, job.rank, &probe->comm, &config) != trncclSuccess) {
    *why = strformat("not measured (%s)", trncclGetLastError(job.world));
    probe->comm = nullptr;
    return false;
  }
  trncclCommUserRank(probe->comm, &probe->rank);
  trncclCommCount(probe->comm, &probe->nranks);
  probe->shape = probe->comm->impl->planShape();
  return true;
}

// Whether the probe exchanged messages with some peer over `transport` (the traffic counters).
bool carriedBy(const Probe& probe, trncclTransport_t transport) {
  std::vector<trncclPeerTraffic_t> traffic(static_cast<size_t>(probe.nranks));
  int count = 0;
  if (trncclCommGetPeerTraffic(probe.comm, traffic.data(), probe.nranks, &count) != trncclSuccess)
    return false;
  for (int peer = 0; peer < count; ++peer)
    if (peer != probe.rank && traffic[peer].transport == transport &&
        traffic[peer].sentBytes + traffic[peer].recvBytes > 0)
      return true;
  return false;
}

// The slowest rank's time of one call of `bytes` as modeledUs counts them (an all-gather's
// whole output, an all-reduce's buffer of floats): the median of job.repeats timings of
// back-to-back calls.
double callUs(const TuneJob& job, const Probe& probe, CollKind call, size_t bytes, bool* ok) {
  std::vector<char> in(std::max<size_t>(bytes, 8)), out(in.size());
  const int iterations =
      std::clamp<int>(static_cast<int>(4e6 / std::max<size_t>(bytes, 8192)), 2, 500);
  auto once = [&]() {
    if (call == CollKind::kAllGather)
      return trncclAllGather(in.data(), out.data(), bytes / probe.nranks, trncclUint8, probe.comm);
    return trncclAllReduce(in.data(), out.data(), bytes / sizeof(float), trncclFloat32, trncclSum,
                           probe.comm);
  };
  std::vector<double> samples;
  for (int rep = -1; rep < job.repeats; ++rep) {  // rep -1 warms up
    if (!check(trncclBarrier(probe.comm), job, "barrier", probe.comm)) return *ok = false, 0;
    const auto start = Clock::now();
    for (int i = 0; i < iterations; ++i)
      if (!check(once(), job, "timed call", probe.comm)) return *ok = false, 0;
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (rep >= 0) samples.push_back(us / iterations);
  }
  double mine = median(samples), slowest = 0;
  if (!check(trncclAllReduce(&mine, &slowest, 1, trncclFloat64, trncclMax, probe.comm), job,
             "all-reduce", probe.comm))
    return *ok = false, 0;
  return slowest;
}

using Field = std::function<double&(CostParams&)>;
using Setter = std::function<void(CostParams&, double)>;

// The value x within [lo, hi] at which the model's time of `algo` running `call` with `bytes`
// (counted as modeledUs counts them) on the probe's shape, with set(costs, x), equals
// measuredUs; the model is monotonic in each figure, and a time outside its range gives the
// nearer bound.
double invert(const CostParams& base, const Setter& set, Algorithm algo, CollKind call,
              size_t bytes, const PlanShape& shape, double measuredUs, double lo, double hi) {
  CostParams c = base;
  auto modeled = [&](double x) {
    set(c, x);
    return modeledUs(algo, call, bytes, shape, c);
  };
  const bool rising = modeled(hi) > modeled(lo);
  for (int i = 0; i < 80; ++i) {
    const double mid = (lo + hi) / 2;
    if ((modeled(mid) < measuredUs) == rising)
      lo = mid;
    else
      hi = mid;
  }
  return (lo + hi) / 2;
}
double invert(const CostParams& base, const Field& field, Algorithm algo, CollKind call,
              size_t bytes, const PlanShape& shape, double measuredUs, double lo, double hi) {
  return invert(base, Setter([&](CostParams& c, double x) { field(c) = x; }), algo, call, bytes,
                shape, measuredUs, lo, hi);
}

// Per rank: an all-gather's blocks, an all-reduce's buffers; a figure is the median over them.
// Large ones, because the calls whose time bandwidth decides are the large ones (DDP's gradient
// buckets are 25 MiB), and on this kind of machine a link slows more than the host's copies
// once messages leave the caches (2 ranks: ring all-gather 13 GB/s per message at 1 MiB per
// rank, 4 at 32 MiB; direct's copies 21 and 13): figures from 64 KiB-1 MiB had the planner
// pick the ring where direct was 1.2-1.6x faster. Figures from 16 MiB alone chose best on the
// run they were measured in and worst over the tables of other days (docs/PLANNER.md).
constexpr size_t kBandwidthBytes[] = {1 << 20, 4 << 20, 16 << 20};
// A link's latency is at least kMinAlphaUs: where the tiny call measured no more than the
// step's own time (step_us is timed separately, and a slow minute, or a sanitizer build, can
// time it above a 2-rank exchange), the fit would say the link costs nothing at all.
constexpr double kMinAlphaUs = 0.01, kMaxAlphaUs = 1e4, kMinGBps = 0.01, kMaxGBps = 1000;

// Times `call` at each of kBandwidthBytes per rank, and the figure `field` at which the model
// gives each time; the figure's median over the sizes goes into *costs.
bool bandwidthFigure(const TuneJob& job, const Probe& probe, Algorithm algo, CollKind call,
                     const Field& field, CostParams* costs, std::vector<double>* times) {
  const size_t perCall = call == CollKind::kAllGather ? static_cast<size_t>(probe.nranks) : 1;
  bool ok = true;
  for (size_t bytes : kBandwidthBytes)
    if (ok) times->push_back(callUs(job, probe, call, bytes * perCall, &ok));
  if (!ok) return false;
  std::vector<double> figures;
  for (size_t i = 0; i < times->size(); ++i)
    figures.push_back(invert(*costs, field, algo, call, kBandwidthBytes[i] * perCall, probe.shape,
                             (*times)[i], kMinGBps, kMaxGBps));
  field(*costs) = median(figures);
  return true;
}

// A link's latency and bandwidth from ring all-gathers over it: alpha from 8 B per rank (with
// the bandwidth as it stands, which hardly matters there), the bandwidth from larger blocks,
// then alpha again with that bandwidth.
bool ringLink(const TuneJob& job, const Probe& probe, LinkClass link, CostParams* costs,
              std::string* note) {
  const Field alphaOf = [link](CostParams& c) -> double& { return c.of(link).alphaUs; };
  const Field gbpsOf = [link](CostParams& c) -> double& { return c.of(link).gbps; };
  const size_t tinyBytes = 8 * static_cast<size_t>(probe.nranks);
  bool ok = true;
  const double tiny = callUs(job, probe, CollKind::kAllGather, tinyBytes, &ok);
  if (!ok) return false;
  auto alphaFor = [&]() {
    return invert(*costs, alphaOf, Algorithm::kRing, CollKind::kAllGather, tinyBytes, probe.shape,
                  tiny, kMinAlphaUs, kMaxAlphaUs);
  };
  alphaOf(*costs) = alphaFor();
  std::vector<double> times;
  if (!bandwidthFigure(job, probe, Algorithm::kRing, CollKind::kAllGather, gbpsOf, costs, &times))
    return false;
  alphaOf(*costs) = alphaFor();
  *note = strformat(
      "ring all-gather on %d ranks, per rank 8 B %.1f us, 1 MiB %.1f us, 4 MiB %.1f us, 16 MiB "
      "%.1f us -> alpha %.2f us, %.2f GB/s",
      probe.nranks, tiny, times[0], times[1], times[2], alphaOf(*costs), gbpsOf(*costs));
  return true;
}

// The library's two-source float reduction (bytes of output) over its copy's speed, on buffers
// larger than the caches: what a reduction costs beside a copy is the kernels' matter, while
// how fast either runs in a collective is the machine's (its cores shared, its data written by
// another core), which the timed collectives say.
double reduceOverCopy(const TuneJob& job) {
  const size_t bytes = 32 << 20, count = bytes / sizeof(float);
  std::vector<float> a(count, 1.0f), b(count, 2.0f), dst(count, 0.0f);
  std::vector<double> copies, reductions;
  const void* srcs[2] = {a.data(), b.data()};
  for (int rep = -1; rep < job.repeats; ++rep) {
    auto start = Clock::now();
    copyBytes(dst.data(), a.data(), bytes, CopyKind::kCached);
    const double copyUs = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    start = Clock::now();
    reduce({trncclFloat32, trncclSum, dst.data(), srcs, 2, count, 0});
    const double reduceUs = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (rep >= 0) copies.push_back(copyUs), reductions.push_back(reduceUs);
  }
  // The fastest of each: other ranks time theirs at once, and a preempted timing only grows.
  return *std::min_element(copies.begin(), copies.end()) /
         *std::min_element(reductions.begin(), reductions.end());
}

// The all-reduce whose time gives the shared-window protocol's synchronisation: small enough
// that its copies and reductions hardly count, above the lines' size (the one-shot form).
constexpr size_t kSyncBytes = 1 << 10;

// The shared-window protocol's synchronisation, and the host's copy and reduction speeds as
// the direct schedules see them (data another core just wrote): a small direct all-reduce,
// then direct all-gathers (copies) and larger all-reduces (copies and reductions). Not the
// barrier: with more ranks than cores every call waits once for each rank to get a core,
// which a barrier pays once and the model's two synchronisations of the one-shot all-reduce
// would pay twice (4 ranks on 2 cores: barrier 11-17 us, 1 KiB all-reduce 12-14 us). The
// reduction keeps its kernel's ratio to the copy; their common level is the median of those
// at which the model gives each timed call's time. (Fitting
// the two separately sent the reduction to the bound: the model's direct all-gather counts
// fewer copies than the schedule makes, so the speed it finds for copies leaves the all-reduce
// no time to reduce in.)
bool directFigures(const TuneJob& job, const Probe& probe, CostParams* costs, std::string* note) {
  bool ok = true;
  const double small = callUs(job, probe, CollKind::kAllReduce, kSyncBytes, &ok);
  if (!ok) return false;
  costs->syncUs = invert(
      *costs, [](CostParams& c) -> double& { return c.syncUs; }, Algorithm::kDirect,
      CollKind::kAllReduce, kSyncBytes, probe.shape, small, 0, kMaxAlphaUs);
  const double ratio = reduceOverCopy(job);
  const Setter hostSpeed = [ratio](CostParams& c, double copy) {
    c.copyGBps = copy;
    c.reduceGBps = copy * ratio;
  };
  std::vector<double> times, levels;
  for (CollKind call : {CollKind::kAllGather, CollKind::kAllReduce})
    for (size_t perRank : kBandwidthBytes) {
      const size_t bytes = perRank * (call == CollKind::kAllGather ? probe.nranks : 1);
      times.push_back(callUs(job, probe, call, bytes, &ok));
      if (!ok) return false;
      levels.push_back(invert(*costs, hostSpeed, Algorithm::kDirect, call, bytes, probe.shape,
                              times.back(), kMinGBps, kMaxGBps));
    }
  hostSpeed(*costs, median(levels));
  *note = strformat(
      "direct on %d ranks: all-reduce 1 KiB %.2f us -> sync %.2f us; all-gather per rank 1 MiB "
      "%.1f us, 4 MiB %.1f us, 16 MiB %.1f us; all-reduce %.1f, %.1f, %.1f us; reduction kernel "
      "%.2fx the copy's speed -> copy %.2f GB/s, reduce %.2f GB/s",
      probe.nranks, small, costs->syncUs, times[0], times[1], times[2], times[3], times[4],
      times[5], ratio, costs->copyGBps, costs->reduceGBps);
  return true;
}

// The software path of one call: an 8 B all-reduce on a communicator of this rank alone.
bool stepFigure(const TuneJob& job, CostParams* costs) {
  Probe self;
  std::string why;
  if (!openProbe(job, job.rank, nullptr, &self, &why)) {
    std::fprintf(stderr, "trnccl-tune rank %d: %s\n", job.rank, why.c_str());
    return false;
  }
  double value = 1, out = 0;
  std::vector<double> samples;
  for (int rep = -1; rep < job.repeats; ++rep) {
    const auto start = Clock::now();
    for (int i = 0; i < 1000; ++i)
      if (!check(trncclAllReduce(&value, &out, 1, trncclFloat64, trncclSum, self.comm), job,
                 "all-reduce", self.comm))
        return false;
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (rep >= 0) samples.push_back(us / 1000);
  }
  costs->stepUs = median(samples);
  return true;
}

constexpr const char* kSingleRank = "not measured (a single rank on rank 0's node)";

// One link class's figures from ring all-gathers among the ranks of `color`, kept only if the
// traffic counters say that class carried them. False when a call failed.
bool linkFigures(const TuneJob& job, int color, bool measurable, const LinkSetup& setup,
                 CostParams* costs, std::string* note) {
  env::ScopedOverride env;
  setFor(setup, &env);
  Probe probe;
  *note = kSingleRank;
  if (!openProbe(job, color, "ring", &probe, note) || !measurable) return true;
  CostParams measured = *costs;
  if (!ringLink(job, probe, setup.link, &measured, note)) return false;
  if (!carriedBy(probe, setup.transport))
    *note =
        strformat("not measured (no message went over %s)", topology::linkClassName(setup.link));
  else
    costs->of(setup.link) = measured.of(setup.link);
  return true;
}

}  // namespace

bool measureRound(const TuneJob& job, CostParams* costs, std::vector<std::string>* notes,
                  int* nodes) {
  if (!stepFigure(job, costs)) return false;
  notes->push_back(strformat("step: 8 B all-reduce on one rank %.2f us", costs->stepUs));
  const topology::Topology& world = job.world->impl->topology();
  const int node = world.nodeOf(job.rank);
  const bool nodeHasPeers = world.ranksOfNode(node).size() > 1;
  const bool spansNodes = world.nnodes() > 1;
  *nodes = world.nnodes();
  // Inside each node (all nodes at once): host shared memory, and NeuronLink emulated over it
  // between chips the trn2 preset links. Across nodes: the job's own, or on one node two
  // emulated ones (each half of the ranks a node).
  const char* half = job.rank < job.nranks / 2 ? "trnccl-tune-a" : "trnccl-tune-b";
  const LinkSetup links[] = {
      {LinkClass::kShm, trncclTransportShm, "shm", nullptr, nullptr},
      {LinkClass::kNeuronLink, trncclTransportNeuronLink, nullptr, "trn2.48xlarge", nullptr},
      {LinkClass::kEfa, trncclTransportEfa, nullptr, nullptr, spansNodes ? nullptr : half},
  };
  for (const LinkSetup& setup : links) {
    const bool acrossNodes = setup.link == LinkClass::kEfa;
    std::string note;
    if (!linkFigures(job, acrossNodes ? 0 : node, acrossNodes || nodeHasPeers, setup, costs, &note))
      return false;
    if (acrossNodes && !spansNodes) note += " (the ranks halved into 2 emulated nodes)";
    notes->push_back(strformat("%s: %s", topology::linkClassName(setup.link), note.c_str()));
    if (setup.link != LinkClass::kShm) continue;
    // The direct schedules' figures, inside each node over shm as well.
    env::ScopedOverride env;
    setFor(setup, &env);
    Probe probe;
    note = kSingleRank;
    if (openProbe(job, node, "direct", &probe, &note) && nodeHasPeers &&
        !directFigures(job, probe, costs, &note))
      return false;
    notes->push_back("direct: " + note);
  }
  return true;
}

}  // namespace trnccl::tools
