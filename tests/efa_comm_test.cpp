// The communicator over efa, ranks in separate processes: registered buffers, init errors
// (a missing provider, settings or providers that differ between ranks, a rank failing early),
// a peer dying under libfabric traffic, destroy's farewell, and communicators created and
// destroyed in a loop without leaking fabric objects. Loopback only. The transport between two
// endpoints of one process is in efa_transport_test.cpp.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "efa_support.hpp"
#include "support/multirank.hpp"
#include "support/sweep.hpp"

namespace trnccl {
namespace {

using namespace efa_test;
using testing::Failures;
using testing::initComm;
using testing::runRanks;

// trncclCommRegister through the real API over efa (tcp), with per-message registration
// forced as on EFA: all-reduces on registered buffers stay correct, a handle is released once,
// and bad arguments are named.
TEST(Efa, RegisteredBuffersCarryAllReducesAndHandlesAreChecked) {
  auto outcomes = runRanks(2, [](int rank, int n, const trncclUniqueId& id) {
    useEfaOver("tcp;ofi_rxm");
    setenv("TRNCCL_EFA_MR_CACHE", "0", 1);
    trncclComm_t comm;
    std::string error = initComm(&comm, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    const size_t count = 3 << 18;  // 3 MiB of floats: rendezvous, striped reads
    std::vector<float> send(count), recv(count);
    void* sendHandle = nullptr;
    void* recvHandle = nullptr;
    if (trncclCommRegister(comm, send.data(), count * sizeof(float), &sendHandle) !=
            trncclSuccess ||
        trncclCommRegister(comm, recv.data(), count * sizeof(float), &recvHandle) != trncclSuccess)
      return std::string("register failed: ") + trncclGetLastError(comm);
    for (int it = 0; it < 3; ++it) {
      for (size_t i = 0; i < count; ++i) send[i] = static_cast<float>((rank + 1) * (i % 977) + it);
      if (trncclAllReduce(send.data(), recv.data(), count, trncclFloat32, trncclSum, comm) !=
          trncclSuccess)
        f.add("all-reduce %d failed: %s", it, trncclGetLastError(comm));
      for (size_t i = 0; i < count; ++i) {
        float expected = 0;  // the serial sum over ranks
        for (int r = 0; r < n; ++r) expected += static_cast<float>((r + 1) * (i % 977) + it);
        if (recv[i] != expected) {
          f.add("iteration %d element %zu: %f, expected %f", it, i, recv[i], expected);
          break;
        }
      }
    }
    int dummy = 0;
    void* handle = &dummy;
    if (trncclCommRegister(comm, nullptr, 64, &handle) != trncclInvalidArgument ||
        handle != nullptr)
      f.add("a NULL buffer was registered");
    if (trncclCommRegister(comm, send.data(), 0, &handle) != trncclInvalidArgument)
      f.add("a zero-byte registration was accepted");
    else if (!std::strstr(trncclGetLastError(comm), "trncclCommRegister"))
      f.add("the error does not name the call: %s", trncclGetLastError(comm));
    if (trncclCommDeregister(comm, &dummy) != trncclInvalidArgument)
      f.add("a handle this communicator did not give out was accepted");
    if (trncclCommDeregister(comm, sendHandle) != trncclSuccess ||
        trncclCommDeregister(comm, recvHandle) != trncclSuccess)
      f.add("deregister failed: %s", trncclGetLastError(comm));
    if (trncclCommDeregister(comm, sendHandle) != trncclInvalidArgument)
      f.add("a handle was deregistered twice");
    // Unregistered buffers still work after the handles are gone.
    if (trncclAllReduce(send.data(), recv.data(), count, trncclFloat32, trncclSum, comm) !=
        trncclSuccess)
      f.add("all-reduce after deregistering failed: %s", trncclGetLastError(comm));
    trncclCommDestroy(comm);
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

TEST(Efa, InitWithAMissingProviderFailsOnEveryRankWithTheOfferedList) {
  auto outcomes = runRanks(2, [](int rank, int n, const trncclUniqueId& id) {
    setenv("TRNCCL_TRANSPORT", "efa", 1);
    setenv("TRNCCL_FI_PROVIDER", "no-such-provider", 1);
    trncclComm_t comm = nullptr;
    trncclResult_t rc = trncclCommInitRank(&comm, n, id, rank);
    std::string text = trncclGetLastError(nullptr);
    Failures f;
    if (rc == trncclSuccess) f.add("init succeeded with a provider that does not exist");
    if (!contains(text, "no-such-provider") || !contains(text, "fi_getinfo offers"))
      f.add("rank %d: '%s' does not name the provider and what is offered", rank, text.c_str());
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

TEST(Efa, AnUnknownRegistrationCacheSettingFailsInitNamingTheKnob) {
  auto outcomes = runRanks(2, [](int rank, int n, const trncclUniqueId& id) {
    setenv("FI_TCP_IFACE", "lo", 1);
    setenv("TRNCCL_TRANSPORT", "efa", 1);
    setenv("TRNCCL_EFA_MR_CACHE", "sometimes", 1);
    trncclComm_t comm = nullptr;
    trncclResult_t rc = trncclCommInitRank(&comm, n, id, rank);
    std::string text = trncclGetLastError(nullptr);
    Failures f;
    if (rc != trncclInvalidArgument)
      f.add("rank %d: init returned %s", rank, trncclGetErrorString(rc));
    if (!contains(text, "TRNCCL_EFA_MR_CACHE='sometimes'") || !contains(text, "auto, 1 or 0"))
      f.add("rank %d: '%s' does not name the knob and its values", rank, text.c_str());
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// Addresses of one provider are meaningless to another: init must say so, not hand a 16-byte
// sockaddr to an address vector that reads a longer one.
TEST(Efa, ProvidersThatDifferBetweenRanksAreNamedAtInit) {
  auto outcomes = runRanks(2, [](int rank, int n, const trncclUniqueId& id) {
    useEfaOver(rank == 0 ? "tcp;ofi_rxm" : "shm");
    trncclComm_t comm = nullptr;
    trncclResult_t rc = trncclCommInitRank(&comm, n, id, rank);
    std::string text = trncclGetLastError(nullptr);
    Failures f;
    if (rc != trncclInvalidUsage)
      f.add("rank %d: init returned %s", rank, trncclGetErrorString(rc));
    if (!contains(text, "'tcp;ofi_rxm'") || !contains(text, "'shm'") ||
        !contains(text, "TRNCCL_FI_PROVIDER"))
      f.add("rank %d: '%s' does not name both providers and the knob", rank, text.c_str());
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// Ranks on different nodes cannot compare settings through a node segment: the bootstrap's
// exchange round carries them.
TEST(Efa, SettingsThatDifferAcrossNodesFailInitNamingTheKnob) {
  for (const char* knob : {"TRNCCL_ALGO", "TRNCCL_TRANSPORT"}) {
    SCOPED_TRACE(knob);
    auto outcomes = runRanks(2, [knob](int rank, int n, const trncclUniqueId& id) {
      setenv("FI_TCP_IFACE", "lo", 1);
      setenv("TRNCCL_HOSTID", rank == 0 ? "node-a" : "node-b", 1);
      if (std::string(knob) == "TRNCCL_ALGO")
        setenv("TRNCCL_ALGO", rank == 0 ? "allreduce:ring" : "", 1);
      else
        setenv("TRNCCL_TRANSPORT", rank == 0 ? "self,shm,efa" : "efa", 1);
      trncclComm_t comm = nullptr;
      trncclResult_t rc = trncclCommInitRank(&comm, n, id, rank);
      std::string text = trncclGetLastError(nullptr);
      Failures f;
      if (rc != trncclInvalidUsage)
        f.add("rank %d: init returned %s: %s", rank, trncclGetErrorString(rc), text.c_str());
      if (!contains(text, knob)) f.add("rank %d: '%s' does not name the knob", rank, text.c_str());
      return f.text();
    });
    EXPECT_ALL_RANKS_OK(outcomes);
  }
}

// A rank that fails before the exchange round (its provider does not exist) leaves; the others
// hear about it from the bootstrap instead of waiting out their timeout.
TEST(Efa, RankThatFailsBeforeTheExchangeIsNamedByTheOthers) {
  auto outcomes = runRanks(3, [](int rank, int n, const trncclUniqueId& id) {
    setenv("FI_TCP_IFACE", "lo", 1);
    setenv("TRNCCL_TRANSPORT", "efa", 1);
    setenv("TRNCCL_TIMEOUT", "20", 1);
    if (rank == 2) setenv("TRNCCL_FI_PROVIDER", "no-such-provider", 1);
    auto start = Clock::now();
    trncclComm_t comm = nullptr;
    trncclResult_t rc = trncclCommInitRank(&comm, n, id, rank);
    std::string text = trncclGetLastError(nullptr);
    Failures f;
    if (rc == trncclSuccess) {
      f.add("rank %d: init succeeded without rank 2", rank);
      trncclCommDestroy(comm);
    }
    if (rank != 2 && !contains(text, "rank 2"))
      f.add("rank %d: '%s' does not name rank 2", rank, text.c_str());
    if (since(start) > 15) f.add("rank %d: took %.1f s to fail", rank, since(start));
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

long minorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Over tcp;ofi_rxm, libfabric 1.17 left alone posts its whole first chunk of 1024 receive
// buffers and grows the pool by another 16 MiB (about 4200 page faults, 10-14 ms) at a random
// point in the first few hundred messages: a stall in a user's timed loop. trnccl sets
// FI_OFI_RXM_MSG_RX_SIZE when the user has not (and keeps the user's value when they have), so
// 3000 small exchanges after a short warm-up fault in no new pool. Runs in its own process
// (meson test efa_rxm_defaults): libfabric reads the variable once, when it loads.
TEST(Efa, RxmReceivePoolDoesNotGrowUnderSteadyTraffic) {
  for (const char* userDepth : {"", "64"}) {
    auto outcomes = runRanks(2, [userDepth](int rank, int n, const trncclUniqueId& id) {
      useEfaOver("tcp;ofi_rxm");
      if (*userDepth)
        setenv("FI_OFI_RXM_MSG_RX_SIZE", userDepth, 1);
      else
        unsetenv("FI_OFI_RXM_MSG_RX_SIZE");
      trncclComm_t comm = nullptr;
      std::string error = testing::initComm(&comm, n, id, rank);
      if (!error.empty()) return error;
      Failures f;
      float out[2] = {1.0f, 2.0f}, in[2] = {};
      auto exchange = [&](int times) {
        for (int i = 0; i < times && f.empty(); ++i) {
          trncclGroupStart();
          trncclSend(out, 2, trncclFloat32, 1 - rank, comm);
          trncclRecv(in, 2, trncclFloat32, 1 - rank, comm);
          if (trncclGroupEnd() != trncclSuccess)
            f.add("rank %d exchange %d: %s", rank, i, trncclGetLastError(comm));
        }
      };
      exchange(20);  // connects and allocates the first chunks
      const long before = minorFaults();
      exchange(3000);
      const long faults = minorFaults() - before;
      if (f.empty() && faults > 2500)  // sanitizers add about 1100; a grown pool 4200
        f.add("rank %d: %ld page faults during 3000 8-byte exchanges (libfabric grew a pool)", rank,
              faults);
      const char* depth = std::getenv("FI_OFI_RXM_MSG_RX_SIZE");
      const std::string expected = *userDepth ? userDepth : "256";
      if (!depth || expected != depth)
        f.add("rank %d: FI_OFI_RXM_MSG_RX_SIZE is '%s' after init, expected %s", rank,
              depth ? depth : "(unset)", expected.c_str());
      trncclCommDestroy(comm);
      return f.text();
    });
    EXPECT_ALL_RANKS_OK(outcomes) << "user's FI_OFI_RXM_MSG_RX_SIZE '" << userDepth << "'";
  }
}

// Parameter: the libfabric provider (one of kSocketProviders).
class EfaOverTcp : public ::testing::TestWithParam<const char*> {};

TEST_P(EfaOverTcp, PeerDeathUnderLibfabricTrafficIsNamedBySurvivors) {
  const int nranks = 3;
  const char* provider = GetParam();
  auto outcomes = runRanks(nranks, [provider](int rank, int n, const trncclUniqueId& id) {
    useEfaOver(provider);
    setenv("TRNCCL_TIMEOUT", "60", 1);
    trncclComm_t comm = nullptr;
    std::string error = testing::initComm(&comm, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    std::vector<float> data(1 << 18, 1.0f);
    if (trncclAllReduce(data.data(), data.data(), data.size(), trncclFloat32, trncclSum, comm) !=
        trncclSuccess)
      f.add("first all-reduce failed: %s", trncclGetLastError(comm));
    if (rank == n - 1) kill(getpid(), SIGKILL);
    auto start = Clock::now();
    trncclResult_t rc =
        trncclAllReduce(data.data(), data.data(), data.size(), trncclFloat32, trncclSum, comm);
    std::string text = trncclGetLastError(comm);
    if (rc == trncclSuccess) f.add("rank %d: the all-reduce succeeded without rank 2", rank);
    if (!contains(text, "rank " + std::to_string(n - 1)))
      f.add("rank %d: '%s' does not name rank %d", rank, text.c_str(), n - 1);
    if (since(start) > 30) f.add("rank %d needed %.1f s to notice", rank, since(start));
    trncclCommAbort(comm);
    return f.text();
  });
  ASSERT_EQ(static_cast<int>(outcomes.size()), nranks);
  for (int r = 0; r < nranks - 1; ++r)
    EXPECT_TRUE(outcomes[r].exitCode == 0 && outcomes[r].failures.empty())
        << "rank " << r << ": " << outcomes[r].failures;
  EXPECT_EQ(outcomes[nranks - 1].signal, SIGKILL);
}

// A sender that destroys its communicator right after its last send waits for the receiver's
// farewell, which comes only once the receiver finished its operations: the message (eager,
// under the rendezvous threshold) is not left in a socket the closing endpoint could take
// with it. The wait is bounded: this receiver takes its message after 300 ms but destroys only
// 3 s later, and the sender's destroy returns after about 1 s.
TEST_P(EfaOverTcp, DestroyWaitsForTheReceiverButNotForever) {
  const char* provider = GetParam();
  auto outcomes = runRanks(2, [provider](int rank, int n, const trncclUniqueId& id) {
    useEfaOver(provider);
    trncclComm_t comm = nullptr;
    std::string error = testing::initComm(&comm, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    std::vector<float> data(192 << 10);  // 768 KiB
    if (rank == 0) {
      std::iota(data.begin(), data.end(), 1.0f);
      if (trncclSend(data.data(), data.size(), trncclFloat32, 1, comm) != trncclSuccess)
        f.add("send failed: %s", trncclGetLastError(comm));
      auto start = Clock::now();
      if (trncclCommDestroy(comm) != trncclSuccess) f.add("destroy failed");
      const double took = since(start);
      if (took < 0.2 || took > 3.0)
        f.add(
            "the sender's destroy took %.2f s: it should wait for the receiver (which takes "
            "its message after 0.3 s) but at most about 1 s",
            took);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      if (trncclRecv(data.data(), data.size(), trncclFloat32, 0, comm) != trncclSuccess)
        f.add("receive failed: %s", trncclGetLastError(comm));
      for (size_t i = 0; i < data.size() && f.empty(); ++i)
        if (data[i] != static_cast<float>(i + 1)) f.add("element %zu is %g", i, data[i]);
      std::this_thread::sleep_for(std::chrono::seconds(3));
      if (trncclCommDestroy(comm) != trncclSuccess) f.add("destroy failed");
    }
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// Every communicator opens its own rails (sockets, threads, registrations); splitting and
// destroying 100 of them must not leave one file descriptor behind (run under ASan as well).
TEST_P(EfaOverTcp, HundredCommunicatorsLeaveNoDescriptorsBehind) {
  const char* provider = GetParam();
  auto outcomes = runRanks(2, [provider](int rank, int n, const trncclUniqueId& id) {
    useEfaOver(provider);
    trncclComm_t parent = nullptr;
    std::string error = testing::initComm(&parent, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    int fdsAfterFirst = -1;
    // Under the sanitizers (quick mode) 10: a descriptor lost per communicator shows as well
    // (each one took 0.7 s under ASan).
    const int communicators = testing::quickMode() ? 10 : 100;
    for (int i = 0; i < communicators && f.empty(); ++i) {
      trncclComm_t child = nullptr;
      if (trncclCommSplit(parent, 0, rank, &child, nullptr) != trncclSuccess) {
        f.add("split %d failed: %s", i, trncclGetLastError(parent));
        break;
      }
      int value = rank + 1, sum = 0;
      if (trncclAllReduce(&value, &sum, 1, trncclInt32, trncclSum, child) != trncclSuccess ||
          sum != 3)
        f.add("all-reduce on communicator %d gave %d: %s", i, sum, trncclGetLastError(child));
      if (trncclCommDestroy(child) != trncclSuccess) f.add("destroy %d failed", i);
      if (i == 0) fdsAfterFirst = openFds();
    }
    if (f.empty() && openFds() != fdsAfterFirst)
      f.add("rank %d: %d file descriptors open after the first communicator, %d after %d", rank,
            fdsAfterFirst, openFds(), communicators);
    trncclCommDestroy(parent);
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

INSTANTIATE_TEST_SUITE_P(Providers, EfaOverTcp, ::testing::ValuesIn(kSocketProviders),
                         providerName);

}  // namespace
}  // namespace trnccl
