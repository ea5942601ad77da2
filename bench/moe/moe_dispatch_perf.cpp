// moe_dispatch_perf: the TokenSwitch engine's round trip (routing, dispatch, combine with the
// weights applied) against the dispatch frameworks write by hand (moe/baseline.hpp) over MPI
// and over trncclAllToAllv, side by side in one run, interleaved, medians over repeats.
// Start it like the nccl-tests tools: `trnccl-run -np 4 moe_dispatch_perf ...` (no MPI
// baseline then) or `mpirun -np 4 moe_dispatch_perf ...`.
#include <getopt.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "moe/baseline.hpp"
#include "moe/workload.hpp"
#include "perf/launch.hpp"

using namespace trnccl::bench;
using namespace trnccl::bench::moe;

namespace {

struct Options {
  std::vector<size_t> tokens{2048};
  Shape shape;
  int iters = 5, warmup = 2, repeats = 3, check = 1, memAlloc = 0, baselines = 1;
  trncclEpMode_t mode = trncclEpModeNormal;
  std::string json;
};

const char kHelp[] =
    "Usage: trnccl-run -np N moe_dispatch_perf [options]   (or mpirun -np N ...)\n"
    "MoE dispatch + combine round trip of the TokenSwitch engine (trncclEp*) beside the\n"
    "dispatch frameworks write by hand (per-expert count all-to-all, host sync, permute, token\n"
    "all-to-all-v there and back, inverse permute, weighted sum) over MPI (under mpirun) and\n"
    "over trncclAllToAllv. Identity experts; the engine applies the weights in its combine.\n"
    "  -T, --tokens LIST   tokens per rank, comma separated (2048)\n"
    "  -H, --hidden N      hidden size in elements (2048)\n"
    "  -K, --topk N        top-k experts per token (4)\n"
    "  -E, --experts N     experts, a multiple of the rank count (16)\n"
    "  -d, --dtype TYPE    payload: bf16, fp16, fp32, fp8 (= fp8_e4m3), fp8_e5m2 (bf16); fp8\n"
    "                      rows travel with a per-token scale, the identity experts dequantize\n"
    "                      them, and combine runs in bf16 (the baselines do the same; no time\n"
    "                      includes the experts' dequantization)\n"
    "  -l, --layout NAME   expert_major or flat (expert_major; flat combines unweighted)\n"
    "  -z, --zipf X        Zipf exponent of the routing skew over expert ids (0 = uniform)\n"
    "  -m, --mode MODE     engine mode: normal; low_latency (counts and ids ride with the\n"
    "                      dispatch, no exchange at routing); hierarchical (one copy per node\n"
    "                      across nodes, then fan-out inside the node); auto (low latency up to\n"
    "                      128 tokens per rank) (normal)\n"
    "  -n, --iters N       timed iterations per measurement (5)\n"
    "  -w, --warmup N      warm-up iterations (2)\n"
    "  -r, --repeats N     interleaved repeats; figures are medians over them (3)\n"
    "  -c, --check 0|1     check every variant's result against the serial reference (1)\n"
    "  -A, --memalloc 0|1  allocate the engine's tokens and outputs (received tokens, expert\n"
    "                      outputs) with trncclMemAlloc: on one node dispatch then reads the\n"
    "                      tokens and combine the experts' outputs where they lie instead of\n"
    "                      staging rows (0)\n"
    "  -B, --baselines 0|1 also time the two baselines (1); 0 times the engine alone, e.g.\n"
    "                      under a profiler (the baseline columns then read n/a)\n"
    "  -J, --json FILE     also write one JSON object per row\n"
    "  -h, --help          this help (works without a launcher)\n"
    "Times are the slowest rank's, in microseconds (trip = route + dispatch + combine, the\n"
    "baselines' whole trip); disp_GBs is the payload the engine's dispatch sends to other\n"
    "ranks over its time; sent_MB / base_MB the payload each sends to other ranks per\n"
    "dispatch (the engine a token once per destination rank, the baseline once per expert);\n"
    "x_mpi and x_a2av = baseline time / engine time.\n";

bool parseList(const char* text, std::vector<size_t>* out) {
  out->clear();
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(item.c_str(), &end, 10);
    if (item.empty() || *end) return false;
    out->push_back(v);
  }
  return !out->empty();
}

// Parsed before the launcher is asked for ranks, so that --help works on its own; under a
// launcher only the first process speaks.
bool parseOptions(int argc, char** argv, Options* o, bool quiet, bool* help) {
  static const option longOptions[] = {{"tokens", required_argument, nullptr, 'T'},
                                       {"hidden", required_argument, nullptr, 'H'},
                                       {"topk", required_argument, nullptr, 'K'},
                                       {"experts", required_argument, nullptr, 'E'},
                                       {"dtype", required_argument, nullptr, 'd'},
                                       {"layout", required_argument, nullptr, 'l'},
                                       {"zipf", required_argument, nullptr, 'z'},
                                       {"mode", required_argument, nullptr, 'm'},
                                       {"iters", required_argument, nullptr, 'n'},
                                       {"warmup", required_argument, nullptr, 'w'},
                                       {"repeats", required_argument, nullptr, 'r'},
                                       {"check", required_argument, nullptr, 'c'},
                                       {"memalloc", required_argument, nullptr, 'A'},
                                       {"json", required_argument, nullptr, 'J'},
                                       {"baselines", required_argument, nullptr, 'B'},
                                       {"help", no_argument, nullptr, 'h'},
                                       {nullptr, 0, nullptr, 0}};
  if (quiet) opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "T:H:K:E:d:l:z:m:n:w:r:c:A:B:J:h", longOptions, nullptr)) !=
         -1) {
    bool ok = true;
    switch (c) {
      case 'T': ok = parseList(optarg, &o->tokens); break;
      case 'H': o->shape.hidden = std::strtoull(optarg, nullptr, 10); break;
      case 'K': o->shape.topk = std::atoi(optarg); break;
      case 'E': o->shape.experts = std::atoi(optarg); break;
      case 'd': ok = parseDtype(optarg, &o->shape.dtype); break;
      case 'l':
        ok = !std::strcmp(optarg, "flat") || !std::strcmp(optarg, "expert_major");
        o->shape.layout =
            !std::strcmp(optarg, "flat") ? trncclEpLayoutFlat : trncclEpLayoutExpertMajor;
        break;
      case 'z': o->shape.zipf = std::atof(optarg); break;
      case 'm':
        ok = !std::strcmp(optarg, "normal") || !std::strcmp(optarg, "low_latency") ||
             !std::strcmp(optarg, "hierarchical") || !std::strcmp(optarg, "auto");
        o->mode = !std::strcmp(optarg, "low_latency")    ? trncclEpModeLowLatency
                  : !std::strcmp(optarg, "hierarchical") ? trncclEpModeHierarchical
                  : !std::strcmp(optarg, "auto")         ? trncclEpModeAuto
                                                         : trncclEpModeNormal;
        break;
      case 'n': o->iters = std::max(1, std::atoi(optarg)); break;
      case 'w': o->warmup = std::max(0, std::atoi(optarg)); break;
      case 'r': o->repeats = std::max(1, std::atoi(optarg)); break;
      case 'c': o->check = std::atoi(optarg); break;
      case 'A': o->memAlloc = std::atoi(optarg); break;
      case 'B':
        ok = !std::strcmp(optarg, "0") || !std::strcmp(optarg, "1");
        o->baselines = std::atoi(optarg);
        break;
      case 'J': o->json = optarg; break;
      case 'h':
        if (!quiet) std::fputs(kHelp, stdout);
        *help = true;
        return false;
      default:  // getopt said which option
        if (!quiet) std::fprintf(stderr, "moe_dispatch_perf: see --help\n");
        return false;
    }
    if (!ok) {
      if (!quiet)
        std::fprintf(stderr, "moe_dispatch_perf: bad value for -%c ('%s'); see --help\n", c,
                     optarg ? optarg : "");
      return false;
    }
  }
  if (optind < argc) {
    if (!quiet)
      std::fprintf(stderr, "moe_dispatch_perf: unexpected argument '%s'; see --help\n",
                   argv[optind]);
    return false;
  }
  return true;
}

const char* modeName(trncclEpMode_t mode) {
  return mode == trncclEpModeLowLatency     ? "low_latency"
         : mode == trncclEpModeHierarchical ? "hierarchical"
         : mode == trncclEpModeAuto         ? "auto"
                                            : "normal";
}

double nowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty()      ? 0
         : v.size() % 2 ? v[v.size() / 2]
                        : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// The slowest rank's value.
double slowest(trncclComm_t comm, double mine) {
  double out = mine;
  (void)trncclAllReduce(&mine, &out, 1, trncclFloat64, trncclMax, comm);
  return out;
}

struct EngineTimes {
  double route = 0, dispatch = 0, expert = 0, combine = 0;
};

// The engine's output buffers: ordinary memory, or trncclMemAlloc's (-A 1).
class Buffer {
 public:
  explicit Buffer(bool shared) : shared_(shared) {}
  ~Buffer() {
    if (shared_ && data_) (void)trncclMemFree(data_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  bool allocate(size_t bytes) {
    size_ = bytes;
    if (!shared_) {
      plain_.resize(bytes);
      data_ = plain_.data();
      return true;
    }
    void* p = nullptr;
    if (trncclMemAlloc(&p, bytes == 0 ? 1 : bytes) != trncclSuccess) return false;
    data_ = static_cast<char*>(p);
    return true;
  }
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  bool shared_;
  std::vector<char> plain_;
  char* data_ = nullptr;
  size_t size_ = 0;
};

class Engine {
 public:
  Engine(trncclComm_t comm, int nranks, const Shape& s, size_t maxTokens, trncclEpMode_t mode,
         bool memAlloc)
      : shape_(s), tokens_(memAlloc), received_(memAlloc), expertOut_(memAlloc) {
    trncclEpConfig_t config = TRNCCL_EP_CONFIG_INITIALIZER;
    config.numExperts = s.experts;
    config.maxDispatchTokensPerRank = static_cast<int>(maxTokens);
    config.maxRecvTokensPerRank = static_cast<int>(maxTokens * nranks * s.topk);
    config.maxTokenBytes = s.rowBytes();
    config.payloadType = s.dtype;
    config.mode = mode;
    ok_ = trncclEpGroupCreate(comm, &config, &group_) == trncclSuccess;
    ok_ = ok_ && tokens_.allocate(maxTokens * s.rowBytes());
    ok_ = ok_ && received_.allocate(config.maxRecvTokensPerRank * s.rowBytes());
    if (s.fp8()) {
      scales_.resize(config.maxRecvTokensPerRank);
      ok_ = ok_ && expertOut_.allocate(config.maxRecvTokensPerRank * s.combineRowBytes());
    }
    weights_.resize(config.maxRecvTokensPerRank * s.topk);
    ids_.resize(config.maxRecvTokensPerRank * s.topk);
  }
  ~Engine() {
    if (group_) trncclEpGroupDestroy(group_);
  }
  bool ok() const { return ok_; }
  // One round trip; adds each phase's time to *times.
  bool roundTrip(const Workload& w, void* out, EngineTimes* times) {
    const Shape& s = shape_;
    if (w.tokens.size() > tokens_.size()) return false;
    if (!tokensIn_) {  // the workload's tokens, in the engine's memory (-A 1: trncclMemAlloc)
      std::copy(w.tokens.begin(), w.tokens.end(), tokens_.data());
      tokensIn_ = true;
    }
    const bool flat = s.layout == trncclEpLayoutFlat;
    double t0 = nowUs();
    trncclEpRouting_t routing = nullptr;
    if (trncclEpCreateRouting(group_, w.topkIdx.data(), trncclInt64, s.tokens, s.topk, s.layout,
                              &routing) != trncclSuccess)
      return false;
    double t1 = nowUs();
    size_t capacity = received_.size() / s.rowBytes();
    int64_t* ids = flat ? ids_.data() : nullptr;
    bool ok = s.fp8() ? trncclEpDispatchScaled(routing, tokens_.data(), w.scales.data(), s.hidden,
                                               w.weights.data(), received_.data(), scales_.data(),
                                               weights_.data(), ids, capacity) == trncclSuccess
                      : trncclEpDispatch(routing, tokens_.data(), s.hidden, w.weights.data(),
                                         received_.data(), weights_.data(), ids,
                                         capacity) == trncclSuccess;
    // The identity experts: what came in (fp8: dequantized to bf16, as the baselines do).
    const char* expertOut = received_.data();
    size_t numRecv = 0;
    double t2 = nowUs();
    if (ok && s.fp8()) {
      ok = trncclEpRoutingGetCounts(routing, &numRecv, nullptr, 0) == trncclSuccess;
      dequantizeRows(s.dtype, received_.data(), scales_.data(), numRecv, s.hidden,
                     expertOut_.data());
      expertOut = expertOut_.data();
    }
    const double experts = nowUs() - t2;
    const double dispatchUs = t2 - t1;
    t2 += experts;  // combine starts after the experts
    ok = ok && trncclEpCombine(routing, expertOut, s.hidden, out, flat ? 0 : 1) == trncclSuccess;
    double t3 = nowUs();
    times->route += t1 - t0;
    times->dispatch += dispatchUs;
    times->expert += experts;
    times->combine += t3 - t2;
    if (ok && sentRows_ == 0) sentRows_ = countSentRows(w);
    trncclEpRoutingDestroy(routing);
    return ok;
  }
  size_t sentBytes() const { return sentRows_ * shape_.rowBytes(); }
  void setRank(int rank, int nranks) {
    rank_ = rank;
    nranks_ = nranks;
  }

 private:
  // Rows to other ranks: one per (token, destination rank other than this one).
  size_t countSentRows(const Workload& w) const {
    const int L = shape_.experts / nranks_;
    size_t rows = 0;
    for (size_t t = 0; t < shape_.tokens; ++t) {
      std::vector<bool> seen(nranks_, false);
      for (int k = 0; k < shape_.topk; ++k) {
        const int64_t e = w.topkIdx[t * shape_.topk + k];
        if (e < 0) continue;
        const int q = static_cast<int>(e / L);
        if (q != rank_ && !seen[q]) ++rows;
        seen[q] = true;
      }
    }
    return rows;
  }
  Shape shape_;
  trncclEpGroup_t group_ = nullptr;
  bool ok_ = false;
  Buffer tokens_, received_, expertOut_;
  bool tokensIn_ = false;
  std::vector<float> scales_, weights_;
  std::vector<int64_t> ids_;
  size_t sentRows_ = 0;
  int rank_ = 0, nranks_ = 1;
};

void barrier(trncclComm_t comm) {
  (void)trncclBarrier(comm);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool help = false;
  if (!parseOptions(argc, argv, &o, !isFirstProcess(), &help)) return help ? 0 : 2;
  Launch launch;
  if (!discoverLaunch("moe_dispatch_perf", &launch)) return 2;
  const int rank = launch.rank, n = launch.nranks;
  if (o.shape.experts % n != 0 || o.shape.topk < 1 || o.shape.topk > o.shape.experts) {
    if (rank == 0)
      std::fprintf(stderr,
                   "moe_dispatch_perf: -E %d must be a multiple of the %d ranks and -K %d "
                   "between 1 and -E\n",
                   o.shape.experts, n, o.shape.topk);
    finishLaunch(launch);
    return 2;
  }
  trncclComm_t comm = nullptr;
  if (trncclCommInitRank(&comm, n, launch.id, rank) != trncclSuccess) {
    std::fprintf(stderr, "rank %d: %s\n", rank, trncclGetLastError(nullptr));
    finishLaunch(launch);
    return 1;
  }
  FILE* json = nullptr;
  if (rank == 0 && !o.json.empty() && !(json = std::fopen(o.json.c_str(), "w")))
    std::fprintf(stderr, "moe_dispatch_perf: cannot write %s\n", o.json.c_str());
  if (rank == 0) {
    std::printf(
        "# moe_dispatch_perf: %d ranks, H=%zu K=%d E=%d %s %s zipf=%.2f, mode %s%s; "
        "%d iters x %d repeats (medians), slowest rank\n",
        n, o.shape.hidden, o.shape.topk, o.shape.experts, dtypeLabel(o.shape.dtype),
        o.shape.layout == trncclEpLayoutFlat ? "flat" : "expert_major", o.shape.zipf,
        modeName(o.mode), o.memAlloc ? ", engine outputs in trncclMemAlloc memory" : "", o.iters,
        o.repeats);
    std::printf("#%7s %9s %9s %9s %9s %8s %8s %8s %9s %9s %7s %7s %6s\n", "tokens", "route_us",
                "disp_us", "comb_us", "trip_us", "disp_GBs", "sent_MB", "base_MB", "mpi_us",
                "a2av_us", "x_mpi", "x_a2av", "#wrong");
  }
  int failed = 0;
  const size_t maxTokens = *std::max_element(o.tokens.begin(), o.tokens.end());
  for (size_t tokens : o.tokens) {
    Shape s = o.shape;
    s.tokens = tokens;
    Workload w = makeWorkload(rank, s);
    Engine engine(comm, n, s, maxTokens, o.mode, o.memAlloc != 0);
    engine.setRank(rank, n);
    if (!engine.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, trncclGetLastError(comm));
      failed = 1;
      break;
    }
    const bool withMpi = launch.viaMpi && o.baselines, withA2av = o.baselines != 0;
    Baseline overMpi(Baseline::Over::kMpi, comm, rank, n, s);
    Baseline overA2av(Baseline::Over::kTrnccl, comm, rank, n, s);
    std::vector<char> out(s.tokens * s.combineRowBytes());
    // Variants run interleaved: each repeat times all of them, back to back.
    std::vector<double> trip, route, disp, comb, mpi, a2av;
    size_t wrong = 0;
    for (int r = -1; r < o.repeats; ++r) {
      const int iters = r < 0 ? o.warmup : o.iters;  // r = -1: warm-up
      if (iters == 0) continue;
      EngineTimes times;
      barrier(comm);
      double t0 = nowUs();
      for (int i = 0; i < iters; ++i) failed |= !engine.roundTrip(w, out.data(), &times);
      double engineUs = (nowUs() - t0 - times.expert) / iters;
      double mpiUs = 0, a2avUs = 0;
      if (withMpi) {
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = nowUs();
        (void)overMpi.takeExpertUs();
        for (int i = 0; i < iters; ++i) failed |= !overMpi.roundTrip(w, out.data());
        mpiUs = (nowUs() - t0 - overMpi.takeExpertUs()) / iters;
        settleMpi();
      }
      if (withA2av) {
        barrier(comm);
        t0 = nowUs();
        (void)overA2av.takeExpertUs();
        for (int i = 0; i < iters; ++i) failed |= !overA2av.roundTrip(w, out.data());
        a2avUs = (nowUs() - t0 - overA2av.takeExpertUs()) / iters;
      }
      if (r < 0) continue;
      trip.push_back(slowest(comm, engineUs));
      route.push_back(slowest(comm, times.route / iters));
      disp.push_back(slowest(comm, times.dispatch / iters));
      comb.push_back(slowest(comm, times.combine / iters));
      mpi.push_back(slowest(comm, mpiUs));
      a2av.push_back(slowest(comm, a2avUs));
    }
    if (o.check) {  // every variant against the serial reference (identity experts)
      EngineTimes unused;
      std::fill(out.begin(), out.end(), 0);
      failed |= !engine.roundTrip(w, out.data(), &unused);
      if (s.layout == trncclEpLayoutExpertMajor) wrong += countWrong(s, w, out.data());
      if (withMpi) {
        std::fill(out.begin(), out.end(), 0);
        failed |= !overMpi.roundTrip(w, out.data());
        wrong += countWrong(s, w, out.data());
        settleMpi();
      }
      if (withA2av) {
        std::fill(out.begin(), out.end(), 0);
        failed |= !overA2av.roundTrip(w, out.data());
        wrong += countWrong(s, w, out.data());
      }
    }
    double wrongAll = slowest(comm, static_cast<double>(wrong));
    const double tripUs = median(trip), mpiUs = median(mpi), a2avUs = median(a2av);
    const double dispUs = median(disp);
    const double engineGBs = slowest(comm, engine.sentBytes() / (dispUs * 1e3));
    const double sentMB = slowest(comm, engine.sentBytes() / 1e6);
    const double baseMB = slowest(comm, overA2av.sentBytes() / 1e6);
    if (rank == 0) {
      char mpiText[32] = "n/a", ratioText[16] = "n/a", a2avText[32] = "n/a",
           a2avRatioText[16] = "n/a", a2avJson[32] = "null";
      if (withMpi) {
        std::snprintf(mpiText, sizeof mpiText, "%.1f", mpiUs);
        std::snprintf(ratioText, sizeof ratioText, "%.2f", mpiUs / tripUs);
      }
      if (withA2av) {
        std::snprintf(a2avText, sizeof a2avText, "%.1f", a2avUs);
        std::snprintf(a2avJson, sizeof a2avJson, "%.2f", a2avUs);
        std::snprintf(a2avRatioText, sizeof a2avRatioText, "%.2f", a2avUs / tripUs);
      }
      std::printf(" %7zu %9.1f %9.1f %9.1f %9.1f %8.2f %8.2f %8.2f %9s %9s %7s %7s %6.0f\n", tokens,
                  median(route), dispUs, median(comb), tripUs, engineGBs, sentMB, baseMB, mpiText,
                  a2avText, ratioText, a2avRatioText, wrongAll);
      if (json)
        std::fprintf(json,
                     "{\"ranks\": %d, \"tokens\": %zu, \"hidden\": %zu, \"topk\": %d, "
                     "\"experts\": %d, \"dtype\": \"%s\", \"layout\": \"%s\", \"mode\": \"%s\", "
                     "\"zipf\": %.3f, \"memalloc\": %d, "
                     "\"route_us\": %.2f, \"dispatch_us\": %.2f, \"combine_us\": %.2f, "
                     "\"roundtrip_us\": %.2f, \"mpi_alltoallv_us\": %s, "
                     "\"trnccl_alltoallv_us\": %s, \"sent_mb\": %.3f, \"baseline_mb\": %.3f, "
                     "\"wrong\": %.0f}\n",
                     n, tokens, s.hidden, s.topk, s.experts, dtypeLabel(s.dtype),
                     s.layout == trncclEpLayoutFlat ? "flat" : "expert_major", modeName(o.mode),
                     s.zipf, o.memAlloc, median(route), dispUs, median(comb), tripUs,
                     withMpi ? mpiText : "null", a2avJson, sentMB, baseMB, wrongAll);
    }
    if (wrongAll > 0) failed = 1;
  }
  if (json) std::fclose(json);
  if (failed) std::fprintf(stderr, "rank %d: %s\n", rank, trncclGetLastError(comm));
  trncclCommDestroy(comm);
  finishLaunch(launch);
  return failed ? 1 : 0;
}
