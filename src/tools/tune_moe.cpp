// trnccl-tune --moe: measures the MoE engine's modes (normal, low latency, and hierarchical when
// the job spans nodes) on this job's ranks for a shape, per batch size, and writes the fastest
// as "moe" tuning entries (docs/MOE.md) that groups in auto mode then follow. Each timing is a
// whole step as a training loop runs it: routing, dispatch, a weighted combine (expert-major,
// identity experts), the slowest rank's time, median over interleaved repeats.
#include "tools/tune_moe.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/cost_model.hpp"
#include "core/dtype.hpp"
#include "core/strformat.hpp"
#include "core/text_file.hpp"
#include "topology/host.hpp"

namespace trnccl::tools {

namespace {

const char* kMoeUsage =
    "usage: trnccl-run -np N trnccl-tune --moe [-o FILE] [-T LIST] [-H N] [-K N] [-E N] [-d TYPE]\n"
    "                  [--quick]\n"
    "\n"
    "Times the MoE engine's modes (normal; low_latency; hierarchical when the ranks span nodes)\n"
    "for one shape at each batch size, on this job's ranks, and writes the fastest per batch\n"
    "size as 'moe' entries of a tuning file (docs/MOE.md): groups created in auto mode on the\n"
    "same number of ranks and nodes then take the mode measured nearest their\n"
    "maxDispatchTokensPerRank. A step is routing + dispatch + weighted combine (expert-major,\n"
    "identity experts); the figure is the slowest rank's, a median over interleaved repeats.\n"
    "  -o FILE   the tuning file to write; an existing one keeps its other lines and loses only\n"
    "            the moe entries for this rank and node count (default: standard output)\n"
    "  -T LIST   tokens per rank, comma separated (8,64,512,2048)\n"
    "  -H N      hidden size in elements (2048)\n"
    "  -K N      top-k experts per token (4)\n"
    "  -E N      experts, a multiple of the rank count (16, or the next multiple)\n"
    "  -d TYPE   payload: bf16, fp16 or fp32 (bf16)\n"
    "  --quick   fewer repetitions (a smoke test; the choice is noisier)\n"
    "libfabric's tcp provider must stay on loopback: set FI_TCP_IFACE=lo (and FI_NET_IFACE=lo).\n";

struct MoeShape {
  std::vector<long> tokens{8, 64, 512, 2048};
  size_t hidden = 2048;
  int topk = 4, experts = 0;
  trncclDataType_t dtype = trncclBfloat16;
  int repeats = 5;
};

struct Mode {
  trncclEpMode_t mode;
  const char* name;
};

double nowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool ok(trncclResult_t rc, int rank, const char* what, trncclComm_t comm) {
  if (rc == trncclSuccess) return true;
  std::fprintf(stderr, "trnccl-tune --moe rank %d: %s: %s\n", rank, what, trncclGetLastError(comm));
  return false;
}

bool parseTokens(const std::string& text, std::vector<long>* out) {
  out->clear();
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end || v <= 0 || v > (1L << 20)) return false;
    out->push_back(v);
  }
  return !out->empty();
}

// Nodes of the job, as the library groups ranks (TRNCCL_HOSTID, else the host).
int countNodes(trncclComm_t comm, int nranks, bool* good) {
  const uint64_t mine = topology::localHostIdentity().hash;
  std::vector<uint64_t> all(nranks);
  *good = trncclAllGather(&mine, all.data(), 1, trncclUint64, comm) == trncclSuccess;
  return static_cast<int>(std::set<uint64_t>(all.begin(), all.end()).size());
}

// Uniform routing: each token's top-k distinct experts, weights summing to one.
void makeRouting(int rank, long T, const MoeShape& s, std::vector<int64_t>* idx,
                 std::vector<float>* weights) {
  std::mt19937_64 rng(0x7e57 + rank * 7919 + T);
  std::vector<int64_t> experts(s.experts);
  idx->assign(T * s.topk, -1);
  weights->assign(T * s.topk, 1.0f / static_cast<float>(s.topk));
  for (long t = 0; t < T; ++t) {
    std::iota(experts.begin(), experts.end(), 0);
    std::shuffle(experts.begin(), experts.end(), rng);
    std::copy(experts.begin(), experts.begin() + s.topk, idx->begin() + t * s.topk);
  }
}

// One mode at one batch size: the step's time (slowest rank, median), or a negative value with
// *failed set when a call failed (the library fails a group or routing on every rank alike;
// each rank prints its error).
double timeMode(trncclComm_t comm, int rank, int nranks, const MoeShape& s, long T, Mode mode,
                bool* failed) {
  const size_t rowBytes = s.hidden * dtypeSize(s.dtype);
  trncclEpConfig_t config = TRNCCL_EP_CONFIG_INITIALIZER;
  config.numExperts = s.experts;
  config.maxDispatchTokensPerRank = static_cast<int>(T);
  // Room for every pair on one rank: the low-latency mode's worst case fits too.
  config.maxRecvTokensPerRank = static_cast<int>(std::min<long>(T * nranks * s.topk, 1L << 30));
  config.maxTokenBytes = rowBytes;
  config.payloadType = s.dtype;
  config.mode = mode.mode;
  trncclEpGroup_t group = nullptr;
  if (!ok(trncclEpGroupCreate(comm, &config, &group), rank, mode.name, comm)) {
    *failed = true;
    return -1;
  }
  std::vector<int64_t> idx;
  std::vector<float> weights;
  makeRouting(rank, T, s, &idx, &weights);
  std::vector<char> tokens(T * rowBytes, 1), out(T * rowBytes);
  const size_t capacity = static_cast<size_t>(config.maxRecvTokensPerRank);
  std::vector<char> received(capacity * rowBytes);
  std::vector<float> slotWeights(capacity);
  // About 2 MiB of tokens per timing: one step for large batches, at most 20 for small ones.
  const int iterations = static_cast<int>(std::clamp<size_t>((2u << 20) / (T * rowBytes), 1, 20));
  std::vector<double> samples;
  for (int rep = -1; rep < s.repeats && !*failed; ++rep) {  // rep -1 warms up
    *failed |= !ok(trncclBarrier(comm), rank, "barrier", comm);
    const double start = nowUs();
    for (int i = 0; i < iterations && !*failed; ++i) {
      trncclEpRouting_t routing = nullptr;
      *failed |= !ok(trncclEpCreateRouting(group, idx.data(), trncclInt64, T, s.topk,
                                           trncclEpLayoutExpertMajor, &routing),
                     rank, "routing", comm);
      if (*failed) break;
      *failed |= !ok(trncclEpDispatch(routing, tokens.data(), s.hidden, weights.data(),
                                      received.data(), slotWeights.data(), nullptr, capacity),
                     rank, "dispatch", comm) ||
                 !ok(trncclEpCombine(routing, received.data(), s.hidden, out.data(), 1), rank,
                     "combine", comm);
      trncclEpRoutingDestroy(routing);
    }
    double mine = (nowUs() - start) / iterations, slowest = mine;
    *failed |= !ok(trncclAllReduce(&mine, &slowest, 1, trncclFloat64, trncclMax, comm), rank,
                   "all-reduce", comm);
    if (rep >= 0) samples.push_back(slowest);
  }
  trncclEpGroupDestroy(group);
  if (*failed || samples.empty()) return -1;
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

// The file to write: an existing tuning file without this job's old moe lines, plus the new.
Result<std::string> mergedText(const std::string& path, const std::string& tag,
                               const std::string& lines) {
  std::string base = "trnccl-tuning 1\n";
  if (!path.empty() && access(path.c_str(), F_OK) == 0) {
    auto text = readTextFile(path);
    if (!text.isOk()) return text.status();
    auto parsed = parseTuning(text.value(), path, machineCosts());
    if (!parsed.isOk()) return parsed.status();
    base.clear();
    std::istringstream in(text.value());
    for (std::string line; std::getline(in, line);)
      if (line.rfind("moe " + tag + " ", 0) != 0 && line.rfind("# moe " + tag + ":", 0) != 0)
        base += line + "\n";
  }
  std::string merged = base + lines;
  auto check = parseTuning(merged, path.empty() ? "the new tuning" : path, machineCosts());
  if (!check.isOk()) return check.status();
  return merged;
}

}  // namespace

int tuneMoe(int argc, char** argv) {
  MoeShape s;
  std::string output;
  bool expertsGiven = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool hasValue = i + 1 < argc;
    bool good = true;
    if (arg == "--moe") {
      continue;
    } else if (arg == "-h" || arg == "--help") {
      std::printf("%s", kMoeUsage);
      return 0;
    } else if (arg == "--quick") {
      s.repeats = 3;
    } else if (arg == "-o" && hasValue) {
      output = argv[++i];
    } else if (arg == "-T" && hasValue) {
      good = parseTokens(argv[++i], &s.tokens);
    } else if (arg == "-H" && hasValue) {
      s.hidden = std::strtoull(argv[++i], nullptr, 10);
      good = s.hidden > 0;
    } else if (arg == "-K" && hasValue) {
      s.topk = std::atoi(argv[++i]);
      good = s.topk > 0;
    } else if (arg == "-E" && hasValue) {
      s.experts = std::atoi(argv[++i]);
      good = s.experts > 0;
      expertsGiven = true;
    } else if (arg == "-d" && hasValue) {
      const std::string type = argv[++i];
      s.dtype = type == "bf16" ? trncclBfloat16 : type == "fp16" ? trncclFloat16 : trncclFloat32;
      good = type == "bf16" || type == "fp16" || type == "fp32";
    } else {
      good = false;
    }
    if (!good) {
      std::fprintf(stderr, "trnccl-tune --moe: bad argument '%s'\n%s", arg.c_str(), kMoeUsage);
      return 2;
    }
  }
  int rank = 0, nranks = 0;
  trncclUniqueId id;
  if (trncclGetLaunchInfo(&rank, &nranks, &id) != trncclSuccess) {
    std::fprintf(stderr, "trnccl-tune --moe: %s\n%s", trncclGetLastError(nullptr), kMoeUsage);
    return 2;
  }
  if (!expertsGiven) s.experts = (16 + nranks - 1) / nranks * nranks;
  if (s.experts % nranks != 0 || s.topk > s.experts) {
    if (rank == 0)
      std::fprintf(stderr,
                   "trnccl-tune --moe: -E %d must be a multiple of the %d ranks and at least "
                   "-K %d\n",
                   s.experts, nranks, s.topk);
    return 2;
  }
  trncclComm_t comm = nullptr;
  if (!ok(trncclCommInitRank(&comm, nranks, id, rank), rank, "init", nullptr)) return 1;
  bool good = true;
  const int nodes = countNodes(comm, nranks, &good);
  std::vector<Mode> modes = {{trncclEpModeNormal, "normal"},
                             {trncclEpModeLowLatency, "low_latency"}};
  if (nodes > 1) modes.push_back({trncclEpModeHierarchical, "hierarchical"});
  const std::string tag = strformat("ranks=%d nodes=%d", nranks, nodes);
  if (rank == 0)
    std::printf(
        "# trnccl-tune --moe: %d ranks over %d nodes, H=%zu K=%d E=%d %s; a step is "
        "routing + dispatch + weighted combine, us, slowest rank, median of %d\n",
        nranks, nodes, s.hidden, s.topk, s.experts, dtypeName(s.dtype), s.repeats);
  std::string lines;
  for (long T : s.tokens) {
    std::string times;
    const char* best = nullptr;
    double bestUs = 0;
    for (const Mode& mode : modes) {
      bool failed = false;
      const double us = timeMode(comm, rank, nranks, s, T, mode, &failed);
      if (failed) {
        good = false;
        break;
      }
      times += strformat("%s%s %.1f", times.empty() ? "" : ", ", mode.name, us);
      if (!best || us < bestUs) {
        best = mode.name;
        bestUs = us;
      }
    }
    if (!good) break;
    const std::string line =
        strformat("moe %s tokens=%ld mode=%s hidden_bytes=%zu topk=%d  # %s\n", tag.c_str(), T,
                  best, s.hidden * dtypeSize(s.dtype), s.topk, times.c_str());
    if (rank == 0) std::printf("%s", line.c_str());
    lines += line;
  }
  trncclCommDestroy(comm);
  if (!good) return 1;
  if (rank != 0) return 0;
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  const std::string header = strformat(
      "# moe %s: measured by trnccl-tune --moe on %s, %s: H=%zu K=%d E=%d %s, per mode the "
      "step's us (routing + dispatch + weighted combine, slowest rank, median)\n",
      tag.c_str(), host, date, s.hidden, s.topk, s.experts, dtypeName(s.dtype));
  auto text = mergedText(output, tag, header + lines);
  if (!text.isOk()) {
    std::fprintf(stderr, "trnccl-tune --moe: %s\n", text.status().message().c_str());
    return 1;
  }
  if (output.empty()) {
    std::printf("%s", text.value().c_str());
    return 0;
  }
  if (Status written = writeTextFile(output, text.value()); !written.isOk()) {
    std::fprintf(stderr, "trnccl-tune --moe: %s\n", written.message().c_str());
    return 1;
  }
  std::printf("trnccl-tune --moe: wrote the moe entries for %s into %s\n", tag.c_str(),
              output.c_str());
  return 0;
}

}  // namespace trnccl::tools
