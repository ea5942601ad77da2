// The flight recorder and trnccl-inspect's verdicts, on real rank processes: a stalled rank
// of four is named as behind, a mismatched call names both calls, SIGUSR2 dumps a rank blocked
// in a call, the ring keeps the last N calls, and a failed request's text is on its
// communicator for any thread.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "flight_inspect.hpp"
#include "support/sweep.hpp"

using namespace trnccl::testing;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A fresh directory for one test's dumps.
std::string freshDir(const char* name) {
  char pattern[128];
  std::snprintf(pattern, sizeof(pattern), "/tmp/trnccl-fr-%s-XXXXXX", name);
  const char* dir = mkdtemp(pattern);
  return dir ? dir : "";
}

void removeDir(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') unlink((dir + "/" + e->d_name).c_str());
    closedir(d);
  }
  rmdir(dir.c_str());
}

std::string verdictOf(const std::string& dir) {
  std::vector<std::string> notes;
  auto dumps = trnccl::readFlightDumps(dir, &notes);
  if (!dumps.isOk()) return "unreadable: " + dumps.status().message();
  std::string text = trnccl::inspectFlightDumps(dumps.value());
  for (const auto& note : notes) text += "\nnote: " + note;
  return text;
}

}  // namespace

TEST(FlightRecorder, StalledRankOfFourIsNamedBehind) {
  const std::string dir = freshDir("stall");
  ASSERT_FALSE(dir.empty());
  auto outcomes = runRanks(4, [&](int rank, int n, const trncclUniqueId& id) {
    setenv("TRNCCL_TIMEOUT", "1.5", 1);
    setenv("TRNCCL_FLIGHT_RECORDER_DIR", dir.c_str(), 1);
    trncclComm_t comm;
    std::string error = initComm(&comm, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    std::vector<float> data(1024, 1.0f);
    for (int i = 0; i < 3; ++i)
      if (trncclAllReduce(data.data(), data.data(), 1024, trncclFloat32, trncclSum, comm) !=
          trncclSuccess)
        f.add("rank %d: call %d failed: %s", rank, i + 1, trncclGetLastError(comm));
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(3000));  // never calls #4
      if (trncclCommDumpFlightRecorder(comm, nullptr) != trncclSuccess)
        f.add("rank 2: dump on demand failed: %s", trncclGetLastError(comm));
    } else if (trncclAllReduce(data.data(), data.data(), 1024, trncclFloat32, trncclSum, comm) ==
               trncclSuccess) {
      f.add("rank %d: call #4 succeeded without rank 2", rank);
    }
    trncclCommAbort(comm);
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
  const std::string verdict = verdictOf(dir);
  EXPECT_TRUE(contains(verdict,
                       "VERDICT: rank 2 BEHIND: never called #4 AllReduce(count=1024, "
                       "float, sum) (its last call is #3)"))
      << verdict;
  EXPECT_TRUE(contains(verdict, "files from ranks 0-3")) << verdict;
  EXPECT_TRUE(contains(verdict, "ranks 0, 1, 3: #4 AllReduce(count=1024, float, sum) failed"))
      << verdict;
  EXPECT_TRUE(contains(verdict, "ranks 0, 1, 3 wait for rank 2")) << verdict;
  EXPECT_TRUE(contains(verdict, "first failure (rank")) << verdict;
  removeDir(dir);
}

TEST(FlightRecorder, MismatchedCallNamesBothCalls) {
  const std::string dir = freshDir("mismatch");
  ASSERT_FALSE(dir.empty());
  auto outcomes = runRanks(3, [&](int rank, int n, const trncclUniqueId& id) {
    setenv("TRNCCL_TIMEOUT", "2", 1);
    setenv("TRNCCL_FLIGHT_RECORDER_DIR", dir.c_str(), 1);
    trncclComm_t comm;
    std::string error = initComm(&comm, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    std::vector<float> data(64, 1.0f), gathered(3 * 64);
    if (trncclBroadcast(data.data(), data.data(), 64, trncclFloat32, 0, comm) != trncclSuccess)
      f.add("rank %d: the first call failed: %s", rank, trncclGetLastError(comm));
    trncclResult_t rc =
        rank == 1 ? trncclAllGather(data.data(), gathered.data(), 64, trncclFloat32, comm)
                  : trncclAllReduce(data.data(), data.data(), 64, trncclFloat32, trncclSum, comm);
    if (rc == trncclSuccess) f.add("rank %d: the mismatched call succeeded", rank);
    trncclCommAbort(comm);
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
  const std::string verdict = verdictOf(dir);
  EXPECT_TRUE(contains(verdict,
                       "VERDICT: MISMATCH at call #2: ranks 0, 2 called "
                       "AllReduce(count=64, float, sum); rank 1 called "
                       "AllGather(count=64, float)"))
      << verdict;
  removeDir(dir);
}

TEST(FlightRecorder, SignalDumpsARankBlockedInACall) {
  const std::string dir = freshDir("signal");
  ASSERT_FALSE(dir.empty());
  auto outcomes = runRanks(2, [&](int rank, int n, const trncclUniqueId& id) {
    setenv("TRNCCL_FLIGHT_RECORDER_DIR", dir.c_str(), 1);
    trncclComm_t comm;
    std::string error = initComm(&comm, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    int x = 1;
    if (rank == 1) {
      // Blocked in the call while another thread asks for a dump, as an operator would with
      // kill -USR2.
      std::thread asker([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(400));
        kill(getpid(), SIGUSR2);
      });
      if (trncclAllReduce(&x, &x, 1, trncclInt32, trncclSum, comm) != trncclSuccess)
        f.add("rank 1: %s", trncclGetLastError(comm));
      asker.join();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      if (trncclAllReduce(&x, &x, 1, trncclInt32, trncclSum, comm) != trncclSuccess)
        f.add("rank 0: %s", trncclGetLastError(comm));
    }
    trncclCommDestroy(comm);
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
  std::vector<std::string> notes;
  auto dumps = trnccl::readFlightDumps(dir, &notes);
  ASSERT_TRUE(dumps.isOk());
  ASSERT_EQ(dumps.value().size(), 1u) << verdictOf(dir);
  const trnccl::FlightDump& d = dumps.value()[0];
  EXPECT_EQ(d.header.rank, 1);
  EXPECT_EQ(d.header.reason, "SIGUSR2");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].call, "AllReduce(count=1, int32, sum)");
  EXPECT_TRUE(contains(d.calls[0].state, "running")) << d.calls[0].state;
  EXPECT_EQ(d.calls[0].waitingFor, 0);
  removeDir(dir);
}

TEST(FlightRecorder, KeepsTheLastNCallsAndCanBeTurnedOff) {
  const std::string dir = freshDir("ring");
  ASSERT_FALSE(dir.empty());
  auto outcomes = runRanks(2, [&](int rank, int n, const trncclUniqueId& id) {
    setenv("TRNCCL_FLIGHT_RECORDER_ENTRIES", rank == 0 ? "4" : "0", 1);
    trncclComm_t comm;
    std::string error = initComm(&comm, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    int x = 1;
    for (int i = 0; i < 10; ++i) (void)trncclAllReduce(&x, &x, 1, trncclInt32, trncclSum, comm);
    trncclResult_t rc = trncclCommDumpFlightRecorder(comm, dir.c_str());
    if (rank == 0 && rc != trncclSuccess) f.add("rank 0: %s", trncclGetLastError(comm));
    if (rank == 1 && (rc != trncclInvalidUsage ||
                      !contains(trncclGetLastError(comm), "TRNCCL_FLIGHT_RECORDER_ENTRIES=0")))
      f.add("rank 1 (recorder off): %s", trncclGetLastError(comm));
    trncclCommDestroy(comm);
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
  std::vector<std::string> notes;
  auto dumps = trnccl::readFlightDumps(dir, &notes);
  ASSERT_TRUE(dumps.isOk());
  ASSERT_EQ(dumps.value().size(), 1u);
  const auto& calls = dumps.value()[0].calls;
  ASSERT_EQ(calls.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(calls[i].seq, 7 + i);
    EXPECT_EQ(calls[i].state, "done");
    EXPECT_FALSE(calls[i].algorithm.empty());
  }
  removeDir(dir);
}

TEST(FlightRecorder, DumpsParseBackAndBadFilesAreRefused) {
  trnccl::FlightRecorder recorder;
  recorder.configure(3);
  trnccl::CollArgs a;
  a.kind = trnccl::CollKind::kBroadcast;
  a.count = 5;
  a.dtype = trncclBfloat16;
  a.root = 2;
  const uint64_t seq = recorder.record(&a, 1, "ring");
  recorder.started(seq);
  trnccl::FlightRecorder::Header h;
  h.rank = 1;
  h.nranks = 4;
  h.comm = "c";
  h.commKey = "k";
  h.reason = "test";
  auto parsed = trnccl::parseFlightDump(recorder.format(h));
  ASSERT_TRUE(parsed.isOk()) << parsed.status().message();
  ASSERT_EQ(parsed.value().calls.size(), 1u);
  EXPECT_EQ(parsed.value().calls[0].call, "Broadcast(count=5, bfloat16, root=2)");
  EXPECT_EQ(parsed.value().calls[0].state, "running");
  EXPECT_EQ(parsed.value().header.nranks, 4);
  EXPECT_FALSE(trnccl::parseFlightDump("rank\t1\n").isOk());
  auto bad = trnccl::parseFlightDump("# trnccl flight recorder 1\nbogus\t1\n");
  ASSERT_FALSE(bad.isOk());
  EXPECT_TRUE(contains(bad.status().message(), "line 2")) << bad.status().message();
}

TEST(LastError, AFailedRequestsTextIsOnItsCommunicator) {
  auto outcomes = runRanks(2, [](int rank, int n, const trncclUniqueId& id) {
    setenv("TRNCCL_TIMEOUT", "1", 1);
    trncclComm_t comm;
    std::string error = initComm(&comm, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    if (rank == 0) {
      int x = 1;
      trncclRequest_t request;
      if (trncclAllReduceAsync(&x, &x, 1, trncclInt32, trncclSum, comm, &request) != trncclSuccess)
        return std::string("submit failed");
      (void)trncclWait(&request, TRNCCL_TIMEOUT_DEFAULT);
      // Read from another thread: the text is the communicator's, not only the waiter's.
      std::string seen;
      std::thread reader([&] { seen = trncclGetLastError(comm); });
      reader.join();
      if (!contains(seen, "AllReduce(count=1, int32, sum)") || !contains(seen, "rank 1"))
        f.add("rank 0: trncclGetLastError(comm) on another thread: '%s'", seen.c_str());
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1800));  // never calls
    }
    trncclCommAbort(comm);
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}
