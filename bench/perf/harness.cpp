#include "perf/harness.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bootstrap/bootstrap.hpp"
#include "core/dtype.hpp"
#include "core/env.hpp"
#include "perf/check_data.hpp"
#include "perf/launch.hpp"

namespace trnccl::bench {
namespace {

struct Options {
  size_t minBytes = 32 << 20, maxBytes = 32 << 20;
  double stepFactor = 2;
  size_t stepBytes = 0;
  int iters = 20, warmup = 5;
  int check = 1;
  trncclRedOp_t op = trncclSum;
  trncclDataType_t dtype = trncclFloat32;
  int root = 0;
  int blocking = 1;
  int average = 3;  // 0 rank 0, 1 avg, 2 min, 3 max (slowest rank, the honest default)
  int sideBySide = 0;
  int repeats = 1;
  int memAlloc = 0;  // buffers from trncclMemAlloc
  std::string json;
  // -X: algorithms timed side by side, one communicator each ("default" = the planner).
  std::vector<std::string> algos;
};

// A benchmark buffer from the heap, or from trncclMemAlloc (-A 1) so that local peers map it.
class Buffer {
 public:
  Buffer(size_t bytes, bool shared) : bytes_(bytes), shared_(shared && bytes > 0) {
    if (shared_) {
      if (trncclMemAlloc(reinterpret_cast<void**>(&data_), bytes) != trncclSuccess) {
        std::fprintf(stderr, "trncclMemAlloc(%zu): %s\n", bytes, trncclGetLastError(nullptr));
        std::exit(1);
      }
    } else {
      heap_.resize(bytes);
      data_ = heap_.data();
    }
  }
  ~Buffer() {
    if (shared_) (void)trncclMemFree(data_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  char* data() { return data_; }
  size_t size() const { return bytes_; }
  void assign(const std::vector<char>& from) {
    if (!from.empty()) std::memcpy(data_, from.data(), std::min(from.size(), bytes_));
  }

 private:
  size_t bytes_;
  bool shared_;
  std::vector<char> heap_;
  char* data_ = nullptr;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

bool mpiTypeOf(trncclDataType_t t, MPI_Datatype* out) {
  switch (t) {
    case trncclInt8: *out = MPI_INT8_T; return true;
    case trncclUint8: *out = MPI_UINT8_T; return true;
    case trncclInt32: *out = MPI_INT32_T; return true;
    case trncclUint32: *out = MPI_UINT32_T; return true;
    case trncclInt64: *out = MPI_INT64_T; return true;
    case trncclUint64: *out = MPI_UINT64_T; return true;
    case trncclFloat32: *out = MPI_FLOAT; return true;
    case trncclFloat64: *out = MPI_DOUBLE; return true;
    default: return false;  // MPI has no fp16/bf16/fp8
  }
}

bool mpiOpOf(trncclRedOp_t op, MPI_Op* out) {
  switch (op) {
    case trncclSum: *out = MPI_SUM; return true;
    case trncclProd: *out = MPI_PROD; return true;
    case trncclMax: *out = MPI_MAX; return true;
    case trncclMin: *out = MPI_MIN; return true;
    default: return false;  // MPI has no avg
  }
}

size_t parseSize(const char* text) {
  char* end = nullptr;
  double value = std::strtod(text, &end);
  switch (end && *end ? *end : ' ') {
    case 'K':
    case 'k': value *= 1024; break;
    case 'M':
    case 'm': value *= 1024 * 1024; break;
    case 'G':
    case 'g': value *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<size_t>(value);
}

bool parseType(const char* text, trncclDataType_t* out) {
  static const std::pair<const char*, trncclDataType_t> names[] = {
      {"int8", trncclInt8},        {"uint8", trncclUint8},       {"int32", trncclInt32},
      {"int", trncclInt32},        {"uint32", trncclUint32},     {"int64", trncclInt64},
      {"uint64", trncclUint64},    {"half", trncclFloat16},      {"float16", trncclFloat16},
      {"float", trncclFloat32},    {"float32", trncclFloat32},   {"double", trncclFloat64},
      {"float64", trncclFloat64},  {"bfloat16", trncclBfloat16}, {"f8e4m3", trncclFloat8e4m3},
      {"f8e5m2", trncclFloat8e5m2}};
  for (auto& [name, type] : names)
    if (!std::strcmp(text, name)) {
      *out = type;
      return true;
    }
  return false;
}

bool parseOp(const char* text, trncclRedOp_t* out) {
  static const std::pair<const char*, trncclRedOp_t> names[] = {{"sum", trncclSum},
                                                                {"prod", trncclProd},
                                                                {"max", trncclMax},
                                                                {"min", trncclMin},
                                                                {"avg", trncclAvg}};
  for (auto& [name, op] : names)
    if (!std::strcmp(text, name)) {
      *out = op;
      return true;
    }
  return false;
}

void usage(const char* tool, FILE* out) {
  std::fprintf(
      out,
      "usage: %s [options]   (start it with trnccl-run -np N %s ..., or mpirun -np N)\n"
      "  -b, --minbytes SIZE     smallest size (default 32M; K/M/G suffixes)\n"
      "  -e, --maxbytes SIZE     largest size (default 32M)\n"
      "  -f, --stepfactor F      multiply the size by F each step (default 2)\n"
      "  -i, --stepbytes N       add N bytes each step instead of -f\n"
      "  -n, --iters N           timed iterations per size (default 20)\n"
      "  -w, --warmup_iters N    untimed iterations per size (default 5)\n"
      "  -c, --check 0/1         check results against a serial reference (default 1)\n"
      "  -o, --op OP             sum, prod, max, min, avg (default sum)\n"
      "  -d, --datatype TYPE     int8 uint8 int32 uint32 int64 uint64 half float double\n"
      "                          bfloat16 f8e4m3 f8e5m2 (default float)\n"
      "  -r, --root N            root rank (default 0)\n"
      "  -z, --blocking 0/1      1: blocking calls; 0: non-blocking calls + trncclWait\n"
      "  -A, --memalloc 0/1      1: buffers from trncclMemAlloc (local peers map them)\n"
      "  -a, --average 0/1/2/3   time reported: rank 0, mean, min or max over ranks (default 3)\n"
      "  -R, --repeats N         time each size N times (trnccl and Open MPI interleaved)\n"
      "                          and report the median of the N (default 1)\n"
      "  -J, --json FILE         also append one JSON object per row to FILE\n"
      "  -M, --mpi 0/1           also time the matching Open MPI call on the same buffers,\n"
      "                          interleaved, and print its time, busbw and trnccl/MPI ratio\n"
      "                          (needs mpirun; float/double/integer types, not avg)\n"
      "  -X, --algo NAME         repeatable: time each named algorithm side by side, one\n"
      "                          communicator each (NAME as in TRNCCL_ALGO, e.g. ring or\n"
      "                          allreduce:rhd; 'default' = the planner's choice, or\n"
      "                          TRNCCL_ALGO when set; 'tuned=FILE' = the planner's choice\n"
      "                          with FILE as TRNCCL_TUNING_FILE), interleaved within each\n"
      "                          repeat. The table's columns are the first NAME's; every\n"
      "                          other NAME adds its out-of-place time (us) at the end of\n"
      "                          the row\n"
      "  -h, --help              this text\n"
      "Exit status is non-zero when any result is wrong.\n",
      tool, tool);
}

bool parseOptions(int argc, char** argv, Options* o, const char* tool) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      usage(tool, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value\n", tool, flag.c_str());
      return false;
    }
    const char* v = argv[++i];
    if (flag == "-b" || flag == "--minbytes")
      o->minBytes = parseSize(v);
    else if (flag == "-e" || flag == "--maxbytes")
      o->maxBytes = parseSize(v);
    else if (flag == "-f" || flag == "--stepfactor")
      o->stepFactor = std::atof(v);
    else if (flag == "-i" || flag == "--stepbytes")
      o->stepBytes = parseSize(v);
    else if (flag == "-n" || flag == "--iters")
      o->iters = std::atoi(v);
    else if (flag == "-w" || flag == "--warmup_iters")
      o->warmup = std::atoi(v);
    else if (flag == "-c" || flag == "--check")
      o->check = std::atoi(v);
    else if (flag == "-r" || flag == "--root")
      o->root = std::atoi(v);
    else if (flag == "-z" || flag == "--blocking")
      o->blocking = std::atoi(v);
    else if (flag == "-A" || flag == "--memalloc")
      o->memAlloc = std::atoi(v);
    else if (flag == "-a" || flag == "--average")
      o->average = std::atoi(v);
    else if (flag == "-R" || flag == "--repeats")
      o->repeats = std::atoi(v);
    else if (flag == "-J" || flag == "--json")
      o->json = v;
    else if (flag == "-M" || flag == "--mpi")
      o->sideBySide = std::atoi(v);
    else if (flag == "-X" || flag == "--algo") {
      if (!*v) {
        std::fprintf(stderr, "%s: -X needs an algorithm name or 'default'\n", tool);
        return false;
      }
      o->algos.push_back(v);
    } else if (flag == "-o" || flag == "--op") {
      if (!parseOp(v, &o->op)) {
        std::fprintf(stderr, "%s: unknown op '%s'\n", tool, v);
        return false;
      }
    } else if (flag == "-d" || flag == "--datatype") {
      if (!parseType(v, &o->dtype)) {
        std::fprintf(stderr, "%s: unknown datatype '%s'\n", tool, v);
        return false;
      }
    } else {
      std::fprintf(stderr, "%s: unknown option %s (see --help)\n", tool, flag.c_str());
      return false;
    }
  }
  if (o->iters <= 0 || o->warmup < 0 || o->repeats <= 0 || o->minBytes > o->maxBytes ||
      (o->stepBytes == 0 && o->stepFactor <= 1.0)) {
    std::fprintf(stderr,
                 "%s: need iters > 0, warmup >= 0, repeats > 0, minbytes <= maxbytes and a "
                 "step\n",
                 tool);
    return false;
  }
  return true;
}

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Agrees on one time across ranks with trnccl itself (max/min/sum of a double).
double combineTime(trncclComm_t comm, double local, int mode, int nranks) {
  double out = local;
  trncclRedOp_t op = mode == 2 ? trncclMin : mode == 3 ? trncclMax : trncclSum;
  if (mode == 0) op = trncclMax;  // rank 0's value is broadcast below
  if (mode == 0) {
    trncclBroadcast(&local, &out, 1, trncclFloat64, 0, comm);
    return out;
  }
  trncclAllReduce(&local, &out, 1, trncclFloat64, op, comm);
  return mode == 1 ? out / nranks : out;
}

void printHeader(const std::string& tool, const Options& o, int nranks, bool viaMpi) {
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);
  const char* timeOf = o.average == 0   ? "rank 0"
                       : o.average == 1 ? "mean"
                       : o.average == 2 ? "min"
                                        : "max";
  std::printf(
      "# %s: nranks %d minBytes %zu maxBytes %zu step: %g(%s) warmup iters: %d iters: %d "
      "validation: %d blocking: %d time: %s over ranks, median of %d repeats\n",
      tool.c_str(), nranks, o.minBytes, o.maxBytes,
      o.stepBytes ? static_cast<double>(o.stepBytes) : o.stepFactor,
      o.stepBytes ? "bytes" : "factor", o.warmup, o.iters, o.check, o.blocking, timeOf, o.repeats);
  std::string transports = env::getString(env::kTransport);
  if (transports.empty()) transports = "shm in a node + efa between nodes";
  // With a device topology, linked chips of a node talk over (emulated) NeuronLink.
  for (const env::Var* var : {&env::kTopoFile, &env::kTopoPreset})
    if (!env::getString(*var).empty())
      transports = "neuronlink between linked chips (emulated) + " + transports + ", " + var->name +
                   "=" + env::getString(*var);
  std::printf("#\n#  Using host memory%s, transports %s, on %s; launched by %s%s\n#\n",
              o.memAlloc ? " from trncclMemAlloc" : "", transports.c_str(), host,
              viaMpi ? "mpirun" : "trnccl-run",
              o.sideBySide ? "; Open MPI runs the same call on the same buffers (ratio = MPI "
                             "time / trnccl out-of-place time, > 1 means trnccl is faster)"
                           : "");
  if (!o.algos.empty()) {
    std::printf("#  Algorithms side by side, interleaved in each repeat: the columns are %s's;",
                o.algos[0].c_str());
    for (size_t a = 1; a < o.algos.size(); ++a) std::printf(" %s", o.algos[a].c_str());
    std::printf("%s\n#\n", o.algos.size() > 1 ? " add their out-of-place time (us)" : "");
  }
  // Columns after the in-place ones: Open MPI's (-M 1), then every other -X algorithm's time.
  std::string tailTitle = o.sideBySide ? "        Open MPI" : "";
  std::string tailNames = o.sideBySide ? "      time   busbw  ratio" : "";
  std::string tailUnits = o.sideBySide ? "      (us)  (GB/s)" : "";
  for (size_t a = 1; a < o.algos.size(); ++a) {
    char column[64];
    // "allreduce:ring" -> "ring": the tool runs one collective.
    const std::string& name = o.algos[a];
    const size_t colon = name.rfind(':');
    std::snprintf(column, sizeof(column), "  %9.9s",
                  name.c_str() + (colon == std::string::npos ? 0 : colon + 1));
    tailNames += column;
  }
  std::printf(
      "#                                                              out-of-place       "
      "                in-place%s\n",
      tailTitle.c_str());
  std::printf(
      "#       size         count      type   redop    root     time   algbw   busbw "
      "#wrong     time   algbw   busbw #wrong%s\n",
      tailNames.c_str());
  std::printf(
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)    "
      "        (us)  (GB/s)  (GB/s)       %s\n",
      tailUnits.c_str());
}

}  // namespace

void wholeBufferShape(size_t bytes, size_t esize, int, size_t* count, size_t* sendElems,
                      size_t* recvElems) {
  *count = *sendElems = *recvElems = bytes / esize;
}

void blockPerPeerShape(size_t bytes, size_t esize, int n, size_t* count, size_t* sendElems,
                       size_t* recvElems) {
  *count = bytes / (esize * n);
  *sendElems = *recvElems = *count * n;
}

void blockPerPeerExpected(const PerfCall& c, std::vector<char>& send, std::vector<char>& want) {
  size_t esize = elementBytes(c.dtype), block = c.count * esize;
  fillRank(c.dtype, trncclSum, c.rank, c.count * c.nranks, send.data());
  want.resize(block * c.nranks);
  std::vector<char> peer(block * c.nranks);
  for (int q = 0; q < c.nranks; ++q) {
    fillRank(c.dtype, trncclSum, q, c.count * c.nranks, peer.data());
    std::copy(peer.begin() + c.rank * block, peer.begin() + (c.rank + 1) * block,
              want.begin() + q * block);
  }
}

int perfMain(int argc, char** argv, const PerfCollective& coll) {
  std::string tool = std::string(coll.name) + "_perf";
  Options o;
  if (!parseOptions(argc, argv, &o, tool.c_str())) return 2;
  if (!coll.usesOp) o.op = trncclSum;

  Launch launch;
  if (!discoverLaunch(tool, &launch)) return 2;
  const int rank = launch.rank, nranks = launch.nranks;
  MPI_Datatype mpiType = MPI_DATATYPE_NULL;
  MPI_Op mpiOp = MPI_OP_NULL;
  if (o.sideBySide) {
    bool typeOk = mpiTypeOf(o.dtype, &mpiType), opOk = !coll.usesOp || mpiOpOf(o.op, &mpiOp);
    if (!launch.viaMpi || !typeOk || !opOk) {
      if (rank == 0)
        std::fprintf(stderr, "%s: -M 1 needs mpirun and a type and op MPI has (%s)\n", tool.c_str(),
                     !launch.viaMpi ? "not started by mpirun" : "type or op");
      finishLaunch(launch);
      return 2;
    }
  }
  if (coll.usesRoot && (o.root < 0 || o.root >= nranks)) {
    std::fprintf(stderr, "%s: root %d out of range for %d ranks\n", tool.c_str(), o.root, nranks);
    finishLaunch(launch);
    return 2;
  }
  trncclComm_t comm = nullptr;
  if (trncclCommInitRank(&comm, nranks, launch.id, rank) != trncclSuccess) {
    std::fprintf(stderr, "%s rank %d: %s\n", tool.c_str(), rank, trncclGetLastError(nullptr));
    finishLaunch(launch);
    return 1;
  }
  // The communicators timed: comm itself, or one per -X algorithm (split with that forcing).
  std::vector<trncclComm_t> timed;
  for (const std::string& name : o.algos) {
    // "tuned=FILE": the planner's choice with FILE's costs (its init reads TRNCCL_TUNING_FILE).
    const bool tuned = name.rfind("tuned=", 0) == 0;
    trncclConfig_t config = TRNCCL_CONFIG_INITIALIZER;
    config.algorithm = name == "default" || tuned ? nullptr : name.c_str();
    config.commName = tuned ? "tuned" : name.c_str();
    trncclComm_t forced = nullptr;
    trncclResult_t split;
    {
      env::ScopedOverride planWith;
      if (tuned) planWith.set(env::kTuningFile, name.c_str() + 6);
      split = trncclCommSplit(comm, 0, rank, &forced, &config);
    }
    if (split != trncclSuccess) {
      // A refused configuration is reported on the thread (there is no new communicator).
      const char* why = trncclGetLastError(comm);
      if (!why || !*why) why = trncclGetLastError(nullptr);
      std::fprintf(stderr, "%s rank %d: -X %s: %s\n", tool.c_str(), rank, name.c_str(), why);
      for (trncclComm_t c : timed) trncclCommAbort(c);
      trncclCommAbort(comm);
      finishLaunch(launch);
      return 2;
    }
    timed.push_back(forced);
  }
  const bool splitComms = !timed.empty();
  if (!splitComms) timed.push_back(comm);
  const size_t algos = timed.size();
  const char* algoName = o.algos.empty() ? "" : o.algos[0].c_str();
  FILE* json = nullptr;
  if (rank == 0 && !o.json.empty()) json = std::fopen(o.json.c_str(), "a");

  const size_t esize = dtypeSize(o.dtype);
  if (rank == 0) printHeader(tool, o, nranks, launch.viaMpi);

  int wrongTotal = 0;
  double busSum = 0;
  int rows = 0;
  int failed = 0;
  size_t failedAlgo = 0;  // which timed communicator's call failed
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes && !failed;
       bytes = o.stepBytes ? bytes + o.stepBytes
                           : std::max(bytes + 1, static_cast<size_t>(bytes * o.stepFactor))) {
    size_t count, sendElems, recvElems;
    coll.shape(bytes, esize, nranks, &count, &sendElems, &recvElems);
    std::vector<PerfCall> calls;  // one per timed communicator; calls[0] is the table's
    for (trncclComm_t c : timed) calls.push_back({c, rank, nranks, o.dtype, o.op, o.root, count});
    const PerfCall& call = calls[0];
    size_t sizeBytes = std::max(sendElems, recvElems) * esize;
    Buffer send(sendElems * esize, o.memAlloc), recv(recvElems * esize, o.memAlloc);
    Buffer both(std::max(send.size(), recv.size()), o.memAlloc);  // the in-place buffer
    std::vector<char> want;
    double time[2] = {0, 0}, mpiTime = 0;
    long wrong[2] = {0, 0};
    std::vector<long> wrongOther(algos, 0);  // out of place, per -X algorithm after the first
    const int placements = coll.inPlaceOffsets ? 2 : 1;
    auto buffers = [&](int inPlace, const void** sbuf, char** rbuf) {
      size_t sendOffset = 0, recvOffset = 0;
      if (inPlace) coll.inPlaceOffsets(call, esize, &sendOffset, &recvOffset);
      *sbuf = inPlace ? both.data() + sendOffset : send.data();
      *rbuf = inPlace ? both.data() + recvOffset : recv.data();
      return sendOffset;
    };
    auto once = [&](const PerfCall& c, const void* sbuf, char* rbuf) -> trncclResult_t {
      if (o.blocking) return coll.run(c, sbuf, rbuf);
      trncclRequest_t request = nullptr;
      trncclResult_t rc = coll.runAsync(c, sbuf, rbuf, &request);
      return rc == trncclSuccess ? trncclWait(&request, TRNCCL_TIMEOUT_DEFAULT) : rc;
    };
    // Times iters calls of calls[a] (after the warmup on the first repeat); the slowest rank's.
    auto timeCalls = [&](size_t a, int rep, const void* sbuf, char* rbuf) {
      failedAlgo = a;
      for (int w = 0; rep == 0 && w < o.warmup && !failed; ++w)
        failed = once(calls[a], sbuf, rbuf) != trncclSuccess;
      trncclBarrier(comm);
      double start = seconds();
      for (int it = 0; it < o.iters && !failed; ++it)
        failed = once(calls[a], sbuf, rbuf) != trncclSuccess;
      return combineTime(comm, (seconds() - start) / o.iters, o.average, nranks);
    };
    // Repeats interleave the implementations (trnccl out of place, every other -X algorithm,
    // Open MPI, trnccl in place) so that a noisy neighbour on a shared machine hits all of them
    // alike; medians are kept.
    std::vector<double> samples[2], mpiSamples;
    std::vector<std::vector<double>> otherSamples(algos);
    for (int rep = 0; rep < o.repeats && !failed; ++rep) {
      for (int inPlace = 0; inPlace < placements && !failed; ++inPlace) {
        const void* sbuf;
        char* rbuf;
        buffers(inPlace, &sbuf, &rbuf);
        // Out of place every -X algorithm in turn, starting one further each repeat, so that
        // none always runs first (after the previous size) or after the same neighbour.
        const size_t turns = inPlace ? 1 : algos;
        for (size_t t = 0; t < turns && !failed; ++t) {
          const size_t a = inPlace ? 0 : (t + static_cast<size_t>(rep)) % algos;
          const double us = timeCalls(a, rep, sbuf, rbuf);
          if (!failed) (a == 0 ? samples[inPlace] : otherSamples[a]).push_back(us);
        }
        if (failed) break;
        if (!inPlace && o.sideBySide && !failed) {
          // The same call through Open MPI, on the same buffers, right after trnccl's.
          for (int w = 0; rep == 0 && w < o.warmup; ++w)
            coll.runMpi(call, send.data(), recv.data(), mpiType, mpiOp);
          MPI_Barrier(MPI_COMM_WORLD);
          double mpiStart = seconds();
          for (int it = 0; it < o.iters; ++it)
            coll.runMpi(call, send.data(), recv.data(), mpiType, mpiOp);
          const double mpiLocal = (seconds() - mpiStart) / o.iters;
          settleMpi();
          mpiSamples.push_back(combineTime(comm, mpiLocal, o.average, nranks));
        }
      }
    }
    for (int k = 0; k < placements; ++k) time[k] = median(samples[k]);
    mpiTime = median(mpiSamples);
    // Checks the table's algorithm in both placements and every other one out of place.
    auto check = [&](size_t a, int inPlace) {
      const void* sbuf;
      char* rbuf;
      size_t sendOffset = buffers(inPlace, &sbuf, &rbuf);
      std::vector<char> input(send.size());
      coll.expected(call, input, want);
      if (inPlace) {
        if (!input.empty()) std::memcpy(both.data() + sendOffset, input.data(), input.size());
      } else {
        send.assign(input);
        sbuf = send.data();
      }
      failedAlgo = a;
      failed = once(calls[a], sbuf, rbuf) != trncclSuccess;
      long mine = 0;
      size_t n = std::min(want.size(), recv.size()) / esize;
      for (size_t i = 0; i < n; ++i)
        if (std::memcmp(rbuf + i * esize, want.data() + i * esize, esize) != 0) ++mine;
      long all = mine;
      trncclAllReduce(&mine, &all, 1, trncclInt64, trncclSum, comm);
      return all;
    };
    for (int inPlace = 0; inPlace < placements && o.check && !failed; ++inPlace)
      wrong[inPlace] = check(0, inPlace);
    for (size_t a = 1; a < algos && o.check && !failed; ++a) wrongOther[a] = check(a, 0);
    if (failed) break;
    if (rank == 0) {
      std::printf("%12zu  %12zu  %8s  %6s  %6d", sizeBytes, count, dtypeName(o.dtype),
                  coll.usesOp ? redOpName(o.op) : "none", coll.usesRoot ? o.root : -1);
      auto jsonRow = [&](const char* algo, const char* placement, double seconds, long wrongs) {
        if (!json) return;
        double algbw = sizeBytes / seconds / 1e9;
        std::fprintf(json,
                     "{\"tool\":\"%s\",\"impl\":\"trnccl\",\"nranks\":%d,\"size\":%zu,"
                     "\"count\":%zu,\"type\":\"%s\",\"redop\":\"%s\",\"root\":%d,"
                     "\"placement\":\"%s\",\"time_us\":%.3f,\"algbw\":%.4f,\"busbw\":%.4f,"
                     "\"wrong\":%ld,\"repeats\":%d%s%s%s}\n",
                     coll.name, nranks, sizeBytes, count, dtypeName(o.dtype),
                     coll.usesOp ? redOpName(o.op) : "none", coll.usesRoot ? o.root : -1, placement,
                     seconds * 1e6, algbw, algbw * coll.busFactor(nranks), o.check ? wrongs : -1,
                     o.repeats, *algo ? ",\"algo\":\"" : "", algo, *algo ? "\"" : "");
      };
      for (int k = 0; k < 2; ++k) {
        if (k >= placements) {
          std::printf("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
          continue;
        }
        double algbw = sizeBytes / time[k] / 1e9;
        double busbw = algbw * coll.busFactor(nranks);
        std::printf("  %7.2f  %6.2f  %6.2f  %5s", time[k] * 1e6, algbw, busbw,
                    o.check ? std::to_string(wrong[k]).c_str() : "N/A");
        jsonRow(algoName, k ? "in" : "out", time[k], wrong[k]);
      }
      if (o.sideBySide) {
        double mpiBus = sizeBytes / mpiTime / 1e9 * coll.busFactor(nranks);
        std::printf("  %8.2f  %6.2f  %5.2fx", mpiTime * 1e6, mpiBus, mpiTime / time[0]);
        if (json)
          std::fprintf(json,
                       "{\"tool\":\"%s\",\"impl\":\"mpi\",\"nranks\":%d,\"size\":%zu,"
                       "\"count\":%zu,\"type\":\"%s\",\"redop\":\"%s\",\"placement\":\"out\","
                       "\"time_us\":%.3f,\"busbw\":%.4f,\"ratio\":%.4f,\"repeats\":%d}\n",
                       coll.name, nranks, sizeBytes, count, dtypeName(o.dtype),
                       coll.usesOp ? redOpName(o.op) : "none", mpiTime * 1e6, mpiBus,
                       mpiTime / time[0], o.repeats);
      }
      for (size_t a = 1; a < algos; ++a) {
        const double t = median(otherSamples[a]);
        std::printf("  %9.2f", t * 1e6);
        if (o.check && wrongOther[a]) std::printf("(%ld wrong)", wrongOther[a]);
        jsonRow(o.algos[a].c_str(), "out", t, wrongOther[a]);
      }
      std::printf("\n");
      std::fflush(stdout);
      busSum += sizeBytes / time[0] / 1e9 * coll.busFactor(nranks);
      ++rows;
    }
    wrongTotal += static_cast<int>(wrong[0] + wrong[1]);
    for (long w : wrongOther) wrongTotal += static_cast<int>(w);
  }
  if (failed) {
    std::fprintf(stderr, "%s rank %d%s%s: %s\n", tool.c_str(), rank, splitComms ? " -X " : "",
                 splitComms ? o.algos[failedAlgo].c_str() : "",
                 trncclGetLastError(timed[failedAlgo]));
    if (splitComms)
      for (trncclComm_t c : timed) trncclCommAbort(c);
    trncclCommAbort(comm);
    if (launch.viaMpi) MPI_Abort(MPI_COMM_WORLD, 1);  // peers may be inside an MPI call
    return 1;
  }
  if (rank == 0) {
    std::printf("# Out of bounds values : %d %s\n", wrongTotal, wrongTotal ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %g\n#\n", rows ? busSum / rows : 0.0);
  }
  if (json) std::fclose(json);
  if (splitComms)
    for (trncclComm_t c : timed) trncclCommDestroy(c);
  trncclCommDestroy(comm);
  finishLaunch(launch);
  return wrongTotal ? 1 : 0;
}

}  // namespace trnccl::bench
