// The fault matrix across the network: rank 1 of 3 is killed, stalls or aborts, at init, in the
// middle of a collective and in the middle of a point-to-point transfer, over libfabric's net
// and tcp;ofi_rxm providers (every peer over efa) and over the emulated 2-node layout (ranks 0
// and 1 share a node's shared memory, rank 2 is reached over efa). Every survivor must return
// an error within TRNCCL_TIMEOUT (plus slack) that names rank 1, and none may hang. With
// TRNCCL_FAULT_MATRIX_OUT set, every survivor appends what it got (code, seconds, sentence) as
// a JSON line there; scripts/fault_matrix.sh renders docs/RELIABILITY.md's table from it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/env.hpp"
#include "efa_support.hpp"
#include "support/fault_row.hpp"
#include "support/multirank.hpp"
#include "support/sweep.hpp"

namespace trnccl {
namespace {

using namespace efa_test;
using testing::Failures;
using testing::runRanks;

constexpr double kTimeoutSeconds = 2;
constexpr int kVictim = 1;
// How long a stalled victim stalls: past the survivors' TRNCCL_TIMEOUT, with a margin for a
// loaded machine (they give up 2.0-2.3 s in).
constexpr auto kStallPastTimeout =
    std::chrono::milliseconds(static_cast<int>(kTimeoutSeconds * 1000) + 1500);

struct Layout {
  const char* name;
  const char* provider;
  bool twoNodes;  // ranks 0, 1 on node a (shm), rank 2 on node b
};
constexpr Layout kLayouts[] = {
    {"net", "net", false}, {"tcp", "tcp;ofi_rxm", false}, {"nodes", "net", true}};
constexpr const char* kFaults[] = {"kill", "stall", "abort"};
constexpr const char* kPhases[] = {"init", "collective", "p2p"};

using Cell = std::tuple<int, int, int>;  // layout, fault, phase

void record(const Cell& cell, int rank, trncclResult_t rc, double seconds,
            const std::string& text) {
  const std::string path = env::getString(env::kFaultMatrixOut);
  if (path.empty()) return;
  if (FILE* f = std::fopen(path.c_str(), "a")) {
    std::fputs(testing::faultRowJson(kLayouts[std::get<0>(cell)].name, kFaults[std::get<1>(cell)],
                                     kPhases[std::get<2>(cell)], rank, trncclGetErrorString(rc),
                                     seconds, text)
                   .c_str(),
               f);
    std::fclose(f);
  }
}

// A rank process's settings for a layout, with TRNCCL_TIMEOUT = timeoutSeconds.
void joinLayout(const Layout& layout, int rank, const char* timeoutSeconds) {
  efa::pinSocketProviders("lo", /*overwrite=*/true);
  setenv("TRNCCL_FI_PROVIDER", layout.provider, 1);
  if (layout.twoNodes)
    setenv("TRNCCL_HOSTID", rank < 2 ? "node-a" : "node-b", 1);
  else
    setenv("TRNCCL_TRANSPORT", "efa", 1);
  setenv("TRNCCL_TIMEOUT", timeoutSeconds, 1);
}

// The victim kills itself `delayMs` after the call it runs starts.
void killLater(int delayMs) {
  std::thread([delayMs] {
    std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
    kill(getpid(), SIGKILL);
  }).detach();
}

// The victim aborts its communicator from a second thread, `delayMs` in, at a moment one of its
// calls is running (so that the fault lands inside a transfer). trncclCommAbort frees the
// handle: the victim's thread and the injector agree under one lock, so that no call starts on
// a handle the injector freed (an abort landing between two calls would have left the next
// call a freed handle).
class AbortInjector {
 public:
  static std::shared_ptr<AbortInjector> start(trncclComm_t comm, int delayMs) {
    auto injector = std::make_shared<AbortInjector>();
    std::thread([injector, comm, delayMs] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
      std::unique_lock<std::mutex> lock(injector->mutex_);
      injector->callRunning_.wait(lock, [&] { return injector->inCall_; });
      injector->aborted_ = true;
      trncclCommAbort(comm);  // holding the lock: the victim's next step waits for the free
    }).detach();
    return injector;
  }
  // Runs one library call on the communicator unless it is gone (then trncclInvalidUsage); a
  // call the abort interrupted returns its error. Once a call failed the caller stops touching
  // the handle.
  template <typename Call>
  trncclResult_t run(Call call) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (aborted_) return trncclInvalidUsage;
      inCall_ = true;
    }
    callRunning_.notify_all();
    const trncclResult_t rc = call();
    std::lock_guard<std::mutex> lock(mutex_);
    inCall_ = false;
    return rc;
  }

 private:
  std::mutex mutex_;
  std::condition_variable callRunning_;
  bool inCall_ = false;
  bool aborted_ = false;
};

// Runs a library call, through the injector when there is one.
template <typename Call>
trncclResult_t guarded(const std::shared_ptr<AbortInjector>& injector, Call call) {
  return injector ? injector->run(call) : call();
}

// A count the rank processes share (runRanks forks them after it is mapped): how many ranks
// finished the first call, so that the victim's fault cannot catch a slow survivor still in
// it (the whole communicator fails with the first failure, a call still running included).
struct FirstCalls {
  std::atomic<int>* done = nullptr;
  FirstCalls() {
    void* shared = mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared != MAP_FAILED) done = new (shared) std::atomic<int>(0);
  }
  ~FirstCalls() {
    if (done) munmap(done, sizeof(std::atomic<int>));
  }
  void finished() {
    if (done) done->fetch_add(1);
  }
  // Until every rank finished its first call (at most 20 s).
  void waitForAll(int nranks) const {
    for (auto start = Clock::now(); done && done->load() < nranks && since(start) < 20;)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
};

class FaultMatrix : public ::testing::TestWithParam<Cell> {};

TEST_P(FaultMatrix, SurvivorsNameTheFaultyRankInTime) {
  const Cell cell = GetParam();
  const Layout layout = kLayouts[std::get<0>(cell)];
  const std::string fault = kFaults[std::get<1>(cell)];
  const std::string phase = kPhases[std::get<2>(cell)];
  // The sanitizer builds' reduced sweep runs one layout (every fault and phase).
  if (testing::quickMode() && std::string(layout.name) != "tcp")
    GTEST_SKIP() << "TRNCCL_TEST_QUICK: the tcp layout only";
  const size_t count = 4 << 20;  // 16 MiB of floats: many messages, rendezvous on tcp
  FirstCalls firstCalls;
  auto outcomes = runRanks(
      3,
      [&](int rank, int n, const trncclUniqueId& id) -> std::string {
        joinLayout(layout, rank, "2");
        const bool victim = rank == kVictim;
        if (victim && phase == "init" && fault == "stall")
          std::this_thread::sleep_for(kStallPastTimeout);  // joins after the others gave up
        trncclComm_t comm = nullptr;
        if (victim && phase == "init" && fault == "kill") killLater(2);
        auto start = Clock::now();
        trncclResult_t rc = trncclCommInitRank(&comm, n, id, rank);
        if (victim) {
          if (phase == "init") {
            if (fault == "abort" && comm) trncclCommAbort(comm);  // right after init
            // Alive a while, so that the survivors meet the fault and not this process's exit
            // (a stalled victim's init has already failed after the survivors gave up).
            if (fault != "stall") std::this_thread::sleep_for(std::chrono::milliseconds(1500));
            return "";
          }
          if (rc != trncclSuccess)
            return std::string("victim's init failed: ") + trncclGetLastError(nullptr);
        }
        std::vector<float> data(count, 1.0f);
        std::shared_ptr<AbortInjector> injector;  // the victim's, when it aborts mid-call
        if (rc == trncclSuccess && phase == "init") {
          // Init finished before the fault: the first call must fail instead.
          rc = trncclAllReduce(data.data(), data.data(), 1024, trncclFloat32, trncclSum, comm);
        } else if (rc == trncclSuccess) {
          // A first call that everyone makes: the fault comes in the second.
          rc = trncclAllReduce(data.data(), data.data(), 1024, trncclFloat32, trncclSum, comm);
          if (rc != trncclSuccess)
            return std::string("the first call failed: ") + trncclGetLastError(comm);
          firstCalls.finished();
          if (victim) firstCalls.waitForAll(n);
          start = Clock::now();
          if (victim) {
            if (fault == "stall") {
              std::this_thread::sleep_for(kStallPastTimeout);
              trncclCommAbort(comm);
              return "";
            }
            if (fault == "kill") killLater(5);
            if (fault == "abort") injector = AbortInjector::start(comm, 5);
          }
          // Repeated, so that the fault (5 ms in) lands inside a transfer however fast one is.
          for (int it = 0; it < 40 && rc == trncclSuccess; ++it) {
            if (phase == "collective") {
              rc = guarded(injector, [&] {
                return trncclAllReduce(data.data(), data.data(), count, trncclFloat32, trncclSum,
                                       comm);
              });
            } else if (rank == 0) {
              rc = trncclSend(data.data(), count, trncclFloat32, kVictim, comm);
              if (rc == trncclSuccess)  // an eager send may complete: the reply cannot
                rc = trncclRecv(data.data(), count, trncclFloat32, kVictim, comm);
            } else if (victim) {
              rc = guarded(injector,
                           [&] { return trncclRecv(data.data(), count, trncclFloat32, 0, comm); });
              if (rc == trncclSuccess)
                rc = guarded(injector, [&] {
                  return trncclSend(data.data(), count, trncclFloat32, 0, comm);
                });
            } else {
              return "";  // rank 2 takes no part in the transfer
            }
          }
          if (victim) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1500));
            return "";
          }
        }
        const double took = since(start);
        std::string text = rc == trncclSuccess ? "" : trncclGetLastError(comm ? comm : nullptr);
        if (text.empty() && rc != trncclSuccess) text = trncclGetLastError(nullptr);
        record(cell, rank, rc, took, text);
        Failures f;
        // When rank 1 dies or aborts, a survivor blocked on the other survivor, which failed
        // first (because of rank 1) and left, may name that one: the peer it lost. Known gap
        // (docs/RELIABILITY.md): failures do not yet travel over the network with their cause;
        // the named rank's own error names rank 1.
        const bool neighbourMayBeNamed = fault != "stall";
        const bool namesVictim = contains(text, "rank 1") || contains(text, "missing ranks [1]");
        const bool namesOther = contains(text, "rank " + std::to_string(2 - rank));
        if (rc == trncclSuccess)
          f.add("rank %d: %s in %s succeeded with rank 1 faulty", rank, phase.c_str(), layout.name);
        else if (!namesVictim && !(neighbourMayBeNamed && namesOther))
          f.add("rank %d: '%s' does not name rank 1", rank, text.c_str());
        if (took > kTimeoutSeconds + 6)
          f.add("rank %d needed %.1f s (TRNCCL_TIMEOUT=%.0f)", rank, took, kTimeoutSeconds);
        if (comm) trncclCommAbort(comm);
        return f.text();
      },
      120);
  ASSERT_EQ(outcomes.size(), 3u);
  for (const auto& o : outcomes) {
    if (o.rank == kVictim) continue;
    EXPECT_TRUE(o.exitCode == 0 && o.failures.empty())
        << layout.name << " " << fault << " " << phase << ": rank " << o.rank << ": " << o.failures
        << (o.timedOut ? " (hung)" : "");
  }
}

std::string cellName(const ::testing::TestParamInfo<Cell>& info) {
  return std::string(kLayouts[std::get<0>(info.param)].name) + "_" +
         kFaults[std::get<1>(info.param)] + "_" + kPhases[std::get<2>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(Cells, FaultMatrix,
                         ::testing::Combine(::testing::Range(0, 3), ::testing::Range(0, 3),
                                            ::testing::Range(0, 3)),
                         cellName);

}  // namespace
}  // namespace trnccl

namespace trnccl {
namespace {

// A failure crosses the network with its cause. The 2-node layout over tcp;ofi_rxm, whose
// failed endpoints stay open (so no connection reset tells the other node anything): rank 1
// aborts in the middle of 16 MiB all-reduces, and rank 2, on the other node, must stop within
// a few seconds -- far below TRNCCL_TIMEOUT=30 -- saying that rank 1 called trncclCommAbort.
// Over net the same must hold, except that a reset may arrive before the notice.
class FaultNotice : public ::testing::TestWithParam<const char*> {};

TEST_P(FaultNotice, ReachesTheOtherNodeWithItsCause) {
  const std::string provider = GetParam();
  constexpr double kLongTimeout = 30;
  const size_t count = 4 << 20;
  FirstCalls firstCalls;
  auto outcomes = runRanks(
      3,
      [&](int rank, int n, const trncclUniqueId& id) -> std::string {
        joinLayout(Layout{"nodes", provider.c_str(), /*twoNodes=*/true}, rank, "30");
        trncclComm_t comm = nullptr;
        if (trncclCommInitRank(&comm, n, id, rank) != trncclSuccess)
          return std::string("init: ") + trncclGetLastError(nullptr);
        std::vector<float> data(count, 1.0f);
        if (trncclAllReduce(data.data(), data.data(), count, trncclFloat32, trncclSum, comm) !=
            trncclSuccess)
          return std::string("first call: ") + trncclGetLastError(comm);
        firstCalls.finished();
        std::shared_ptr<AbortInjector> injector;
        if (rank == kVictim) {
          firstCalls.waitForAll(n);
          injector = AbortInjector::start(comm, 5);
        }
        const auto start = Clock::now();
        trncclResult_t rc = trncclSuccess;
        for (int it = 0; it < 200 && rc == trncclSuccess; ++it)
          rc = guarded(injector, [&] {
            return trncclAllReduce(data.data(), data.data(), count, trncclFloat32, trncclSum, comm);
          });
        const double took = since(start);
        if (rank == kVictim) {
          // Its injector aborted and freed the communicator: the handle is not touched again
          // (asking it for its last error here was a use after free that ASan caught once).
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          return "";
        }
        const std::string text = rc == trncclSuccess ? "" : trncclGetLastError(comm);
        trncclCommAbort(comm);
        Failures f;
        if (rc == trncclSuccess) f.add("rank %d: 200 all-reduces succeeded after an abort", rank);
        if (took > 5)
          f.add("rank %d needed %.1f s (TRNCCL_TIMEOUT=%.0f)", rank, took, kLongTimeout);
        const bool cause = contains(text, "rank 1 called trncclCommAbort");
        if (!cause && (provider != "net" || !contains(text, "rank 1")))
          f.add("rank %d: '%s' does not say that rank 1 aborted", rank, text.c_str());
        return f.text();
      },
      120);
  ASSERT_EQ(outcomes.size(), 3u);
  for (const auto& o : outcomes)
    EXPECT_TRUE(o.exitCode == 0 && o.failures.empty())
        << provider << ": rank " << o.rank << ": " << o.failures << (o.timedOut ? " (hung)" : "");
}

INSTANTIATE_TEST_SUITE_P(Providers, FaultNotice, ::testing::Values("tcp;ofi_rxm", "net"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param) == "net" ? "net" : "tcp";
                         });

}  // namespace
}  // namespace trnccl
