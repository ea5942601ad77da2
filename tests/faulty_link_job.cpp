// One rank of the fault matrix's "loss + delay" row (tests/faulty_link_test.sh starts it with
// trnccl-run in two network namespaces whose link drops 1% of TCP segments and delays every
// byte). Nobody dies here: each phase must succeed with the exact result, however long the
// link makes it take. Phases, each timed and reported as one JSON line on stdout (the
// fault matrix's format, scripts/fault_matrix.sh):
//   init        trncclCommInitRank (the rendezvous and address exchange cross the link);
//   collective  `--iters` all-reduces of `--mib` MiB of floats, checked against a serial sum;
//   p2p         rank 0 sends `--mib` MiB to the last rank (across the link) and gets them back.
// Usage: faulty_link_job --layout NAME [--mib N] [--iters N]. Exit 0 when every phase was
// exact; 1 otherwise (the JSON lines say which and why).
#include <trnccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "support/fault_row.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void report(const std::string& layout, const char* phase, int rank, const char* result,
            double seconds, const std::string& message) {
  std::fputs(
      trnccl::testing::faultRowJson(layout, "loss+delay", phase, rank, result, seconds, message)
          .c_str(),
      stdout);
  std::fflush(stdout);
}

// Element i of rank r's all-reduce input: small integers, so every sum is exact in float.
float input(int rank, size_t i) {
  return static_cast<float>((rank + 1) * (1 + i % 13));
}

}  // namespace

int main(int argc, char** argv) {
  std::string layout;
  size_t mib = 16;
  int iters = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--layout" && i + 1 < argc)
      layout = argv[++i];
    else if (arg == "--mib" && i + 1 < argc)
      mib = std::strtoul(argv[++i], nullptr, 10);
    else if (arg == "--iters" && i + 1 < argc)
      iters = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: faulty_link_job --layout NAME [--mib N] [--iters N]\n");
      return 2;
    }
  }
  if (layout.empty() || mib == 0 || iters <= 0) {
    std::fprintf(stderr, "faulty_link_job: --layout is required; --mib and --iters above 0\n");
    return 2;
  }
  int rank = 0, nranks = 0;
  trncclUniqueId id;
  if (trncclGetLaunchInfo(&rank, &nranks, &id) != trncclSuccess) {
    std::fprintf(stderr, "faulty_link_job: %s\n", trncclGetLastError(nullptr));
    return 2;
  }

  bool exact = true;
  auto fail = [&](const char* phase, trncclResult_t rc, double took, const std::string& text) {
    report(layout, phase, rank, trncclGetErrorString(rc), took, text);
    exact = false;
  };

  trncclComm_t comm = nullptr;
  auto start = Clock::now();
  trncclResult_t rc = trncclCommInitRank(&comm, nranks, id, rank);
  if (rc != trncclSuccess) {
    fail("init", rc, secondsSince(start), trncclGetLastError(nullptr));
    return 1;
  }
  report(layout, "init", rank, trncclGetErrorString(rc), secondsSince(start),
         "initialised (" + std::to_string(nranks) + " ranks)");

  const size_t count = mib << 18;  // floats
  std::vector<float> data(count);
  start = Clock::now();
  size_t wrong = 0;
  for (int it = 0; it < iters && rc == trncclSuccess; ++it) {
    for (size_t i = 0; i < count; ++i) data[i] = input(rank, i);
    rc = trncclAllReduce(data.data(), data.data(), count, trncclFloat32, trncclSum, comm);
    for (size_t i = 0; rc == trncclSuccess && i < count; ++i) {
      float want = 0;
      for (int r = 0; r < nranks; ++r) want += input(r, i);
      wrong += data[i] != want;
    }
  }
  const double collectiveSeconds = secondsSince(start);
  if (rc != trncclSuccess)
    fail("collective", rc, collectiveSeconds, trncclGetLastError(comm));
  else if (wrong)
    fail("collective", rc, collectiveSeconds,
         std::to_string(wrong) + " wrong values after " + std::to_string(iters) + " all-reduces");
  else
    report(layout, "collective", rank, "exact", collectiveSeconds,
           std::to_string(iters) + " all-reduces of " + std::to_string(mib) +
               " MiB, every value equal to the serial sum");

  // Rank 0 and the last rank, which the launcher put on the other side of the link.
  const int far = nranks - 1;
  if (rc == trncclSuccess && (rank == 0 || rank == far)) {
    std::vector<float> message(count), back(count, -1.0f);
    for (size_t i = 0; i < count; ++i) message[i] = static_cast<float>(i % 1000003);
    start = Clock::now();
    if (rank == 0) {
      rc = trncclSend(message.data(), count, trncclFloat32, far, comm);
      if (rc == trncclSuccess) rc = trncclRecv(back.data(), count, trncclFloat32, far, comm);
    } else {
      rc = trncclRecv(back.data(), count, trncclFloat32, 0, comm);
      if (rc == trncclSuccess) rc = trncclSend(back.data(), count, trncclFloat32, 0, comm);
    }
    const double took = secondsSince(start);
    if (rc != trncclSuccess)
      fail("p2p", rc, took, trncclGetLastError(comm));
    else if (std::memcmp(message.data(), back.data(), count * sizeof(float)) != 0)
      fail("p2p", rc, took, "the message came back different");
    else
      report(layout, "p2p", rank, "exact", took,
             std::to_string(mib) + " MiB from rank 0 to rank " + std::to_string(far) +
                 " and back, byte for byte");
  }
  if (rc == trncclSuccess)
    rc = trncclCommDestroy(comm);
  else
    trncclCommAbort(comm);
  if (rc != trncclSuccess && exact) fail("destroy", rc, 0, trncclGetLastError(nullptr));
  return exact ? 0 : 1;
}
