// trncclMemAlloc / trncclMemFree: misuse is refused with a clear error, an allocation a queued
// call uses cannot be freed, a peer can map an allocation (the path the single-copy schedules
// take for such buffers), and every collective gives the serial reference's result on such
// buffers, in and out of place, at sizes that take the single-copy forms.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "support/sweep.hpp"
#include "transports/shm/shared_alloc.hpp"

namespace trnccl::testing {
namespace {

bool says(const char* text, const char* part) {
  return std::strstr(text, part) != nullptr;
}

TEST(MemAlloc, MisuseIsRefused) {
  void* p = nullptr;
  EXPECT_EQ(trncclMemAlloc(nullptr, 64), trncclInvalidArgument);
  EXPECT_EQ(trncclMemAlloc(&p, 0), trncclInvalidArgument);
  EXPECT_TRUE(says(trncclGetLastError(nullptr), "size is 0"));
  ASSERT_EQ(trncclMemAlloc(&p, 1000), trncclSuccess);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
  EXPECT_EQ(static_cast<char*>(p)[999], 0);  // zeroed
  std::memset(p, 1, 1000);
  EXPECT_EQ(trncclMemFree(static_cast<char*>(p) + 8), trncclInvalidArgument);
  EXPECT_TRUE(says(trncclGetLastError(nullptr), "lies inside an allocation"));
  int onStack = 0;
  EXPECT_EQ(trncclMemFree(&onStack), trncclInvalidArgument);
  EXPECT_TRUE(says(trncclGetLastError(nullptr), "not a pointer trncclMemAlloc returned"));
  EXPECT_EQ(trncclMemFree(p), trncclSuccess);
  EXPECT_EQ(trncclMemFree(p), trncclInvalidArgument);  // twice
  EXPECT_TRUE(says(trncclGetLastError(nullptr), "or already freed"));
  EXPECT_EQ(trncclMemFree(nullptr), trncclSuccess);
}

// What a peer does with a descriptor's allocation: maps it through /proc/<pid>/fd and reads.
TEST(MemAlloc, APeerCanMapAnAllocation) {
  void* p = nullptr;
  ASSERT_EQ(trncclMemAlloc(&p, 3 << 20), trncclSuccess);
  for (size_t i = 0; i < (3u << 20); ++i) static_cast<unsigned char*>(p)[i] = i * 7 % 251;
  shm::SharedRegion region;
  char* inside = static_cast<char*>(p) + 12345;
  ASSERT_TRUE(shm::findSharedRegion(inside, &region));
  EXPECT_EQ(region.offset, 12345u);
  EXPECT_GE(region.bytes, 3u << 20);
  int heapValue = 0;
  EXPECT_FALSE(shm::findSharedRegion(&heapValue, &region));
  {
    shm::PeerRegionCache cache;
    ASSERT_TRUE(shm::findSharedRegion(p, &region));
    const char* mapped = cache.map(0, getpid(), region);
    ASSERT_NE(mapped, nullptr);
    EXPECT_NE(static_cast<const void*>(mapped), p);  // a second mapping of the same pages
    EXPECT_EQ(std::memcmp(mapped, p, 3 << 20), 0);
    static_cast<char*>(p)[5] = 42;  // shared, not copied
    EXPECT_EQ(mapped[5], 42);
  }
  EXPECT_EQ(trncclMemFree(p), trncclSuccess);
}

TEST(MemAlloc, AnAllocationAQueuedCallUsesCannotBeFreed) {
  auto outcomes = withComm(
      2, [](int) {},
      [](Failures& f, trncclComm_t comm, int rank, int) {
        constexpr size_t kCount = 1 << 16;
        float* buf = nullptr;
        if (trncclMemAlloc(reinterpret_cast<void**>(&buf), kCount * sizeof(float)) !=
            trncclSuccess) {
          f.add("alloc: %s", trncclGetLastError(nullptr));
          return;
        }
        for (size_t i = 0; i < kCount; ++i) buf[i] = static_cast<float>(rank + 1);
        if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
        trncclRequest_t request = nullptr;
        if (trncclAllReduceAsync(buf, buf, kCount, trncclFloat32, trncclSum, comm, &request) !=
            trncclSuccess) {
          f.add("all-reduce: %s", trncclGetLastError(nullptr));
          return;
        }
        if (rank == 0) {
          if (trncclMemFree(buf) != trncclInvalidUsage)
            f.add("freeing a buffer a queued all-reduce uses was not refused");
          else if (!says(trncclGetLastError(nullptr), "still use this buffer"))
            f.add("the refusal does not say why: %s", trncclGetLastError(nullptr));
        }
        if (trncclWait(&request, TRNCCL_TIMEOUT_DEFAULT) != trncclSuccess)
          f.add("wait: %s", trncclGetLastError(nullptr));
        if (buf[0] != 3.0f || buf[kCount - 1] != 3.0f) f.add("all-reduce gave %g", buf[0]);
        if (trncclMemFree(buf) != trncclSuccess)
          f.add("free after the call: %s", trncclGetLastError(nullptr));
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// Every collective on trncclMemAlloc buffers, 3 ranks, blocks of 256 KiB (above the
// single-copy threshold), in and out of place, against values computed here.
TEST(MemAlloc, EveryCollectiveOnSharedBuffers) {
  auto outcomes = withComm(
      3, [](int) {},
      [](Failures& f, trncclComm_t comm, int rank, int n) {
        constexpr size_t kCount = 1 << 16;  // floats per block
        const size_t total = kCount * n;
        float* send = nullptr;
        float* recv = nullptr;
        if (trncclMemAlloc(reinterpret_cast<void**>(&send), total * sizeof(float)) ||
            trncclMemAlloc(reinterpret_cast<void**>(&recv), total * sizeof(float))) {
          f.add("alloc: %s", trncclGetLastError(nullptr));
          return;
        }
        auto value = [](int r, size_t i) { return static_cast<float>(r * 1000 + i % 997); };
        auto fill = [&](float* p, size_t count) {
          for (size_t i = 0; i < count; ++i) p[i] = value(rank, i);
        };
        auto check = [&](const char* what, const float* got, size_t count, auto want) {
          for (size_t i = 0; i < count; ++i)
            if (got[i] != want(i)) {
              f.add("%s: element %zu is %g, expected %g", what, i, got[i], want(i));
              return;
            }
        };
        const float sumOfRanks = static_cast<float>(n * (n - 1) / 2 * 1000);
        for (bool inPlace : {false, true}) {
          std::string tag = inPlace ? " in place" : " out of place";
          // all-reduce
          fill(send, kCount);
          if (inPlace) std::memcpy(recv, send, kCount * sizeof(float));
          if (trncclAllReduce(inPlace ? recv : send, recv, kCount, trncclFloat32, trncclSum,
                              comm) != trncclSuccess)
            return f.add("all-reduce%s: %s", tag.c_str(), trncclGetLastError(nullptr));
          check(("all-reduce" + tag).c_str(), recv, kCount,
                [&](size_t i) { return sumOfRanks + n * static_cast<float>(i % 997); });
          // all-gather
          float* gatherSend = inPlace ? recv + rank * kCount : send;
          fill(gatherSend, kCount);
          if (trncclAllGather(gatherSend, recv, kCount, trncclFloat32, comm) != trncclSuccess)
            return f.add("all-gather%s: %s", tag.c_str(), trncclGetLastError(nullptr));
          check(("all-gather" + tag).c_str(), recv, total,
                [&](size_t i) { return value(static_cast<int>(i / kCount), i % kCount); });
          // reduce-scatter
          float* rsSend = inPlace ? recv : send;
          fill(rsSend, total);
          float* rsRecv = inPlace ? recv + rank * kCount : recv;
          if (trncclReduceScatter(rsSend, rsRecv, kCount, trncclFloat32, trncclSum, comm) !=
              trncclSuccess)
            return f.add("reduce-scatter%s: %s", tag.c_str(), trncclGetLastError(nullptr));
          check(("reduce-scatter" + tag).c_str(), rsRecv, kCount, [&](size_t i) {
            return sumOfRanks + n * static_cast<float>((rank * kCount + i) % 997);
          });
          // broadcast from rank 1
          fill(inPlace ? recv : send, kCount);
          if (trncclBroadcast(inPlace ? recv : send, recv, kCount, trncclFloat32, 1, comm) !=
              trncclSuccess)
            return f.add("broadcast%s: %s", tag.c_str(), trncclGetLastError(nullptr));
          check(("broadcast" + tag).c_str(), recv, kCount, [&](size_t i) { return value(1, i); });
          // reduce to rank 2
          fill(inPlace ? recv : send, kCount);
          if (trncclReduce(inPlace ? recv : send, recv, kCount, trncclFloat32, trncclSum, 2,
                           comm) != trncclSuccess)
            return f.add("reduce%s: %s", tag.c_str(), trncclGetLastError(nullptr));
          if (rank == 2)
            check(("reduce" + tag).c_str(), recv, kCount,
                  [&](size_t i) { return sumOfRanks + n * static_cast<float>(i % 997); });
          // all-to-all: block q of rank r's input is value(r, q * kCount + i)
          fill(inPlace ? recv : send, total);
          if (trncclAllToAll(inPlace ? recv : send, recv, kCount, trncclFloat32, comm) !=
              trncclSuccess)
            return f.add("all-to-all%s: %s", tag.c_str(), trncclGetLastError(nullptr));
          check(("all-to-all" + tag).c_str(), recv, total, [&](size_t i) {
            return value(static_cast<int>(i / kCount), rank * kCount + i % kCount);
          });
          // all-to-all-v with equal blocks, out of place
          if (!inPlace) {
            std::vector<size_t> counts(n, kCount), displs(n);
            for (int q = 0; q < n; ++q) displs[q] = q * kCount;
            fill(send, total);
            if (trncclAllToAllv(send, counts.data(), displs.data(), recv, counts.data(),
                                displs.data(), trncclFloat32, comm) != trncclSuccess)
              return f.add("all-to-all-v: %s", trncclGetLastError(nullptr));
            check("all-to-all-v", recv, total, [&](size_t i) {
              return value(static_cast<int>(i / kCount), rank * kCount + i % kCount);
            });
          }
        }
        trncclMemFree(send);
        trncclMemFree(recv);
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// Bytes and reads this rank has had from each peer so far (the traffic counters count every
// read of a peer's allocation; window reads are not counted).
std::vector<trncclPeerTraffic_t> trafficOf(Failures& f, trncclComm_t comm, int n) {
  std::vector<trncclPeerTraffic_t> traffic(n);
  int count = 0;
  if (trncclCommGetPeerTraffic(comm, traffic.data(), n, &count) != trncclSuccess)
    f.add("traffic: %s", trncclGetLastError(comm));
  return traffic;
}

// What one rank read from each peer in one call: `want(q)` bytes in `reads` reads.
void expectReadsSince(Failures& f, const std::string& what, trncclComm_t comm, int rank, int n,
                      const std::vector<trncclPeerTraffic_t>& before, unsigned reads,
                      const std::function<size_t(int)>& want) {
  std::vector<trncclPeerTraffic_t> after = trafficOf(f, comm, n);
  for (int q = 0; q < n; ++q) {
    if (q == rank) continue;
    const unsigned long long bytes = after[q].recvBytes - before[q].recvBytes;
    const unsigned long long messages = after[q].recvMessages - before[q].recvMessages;
    const unsigned long long expected = reads ? want(q) : 0;
    if (bytes != expected || messages != reads)
      f.add("%s: read %llu bytes in %llu reads from rank %d, expected %llu in %u", what.c_str(),
            bytes, messages, q, expected, reads);
  }
}

constexpr size_t kWindowBytes = 256 << 10;  // TRNCCL_SHM_CHUNK_BYTES in these tests

// The windows' per-destination sub-block of a round, in whole elements (direct_rounds.hpp).
size_t subBlockBytes(int n, size_t esize) {
  return std::max<size_t>(64, kWindowBytes / n / 64 * 64) / esize * esize;
}

// Bytes this rank reads from peer q in a single-copy all-reduce of count elements: the windows'
// rounds, the first of which goes through the windows (it is staged before the ranks know that
// all buffers are shared); in each later round, this rank's part of q's input, then q's part of
// q's output. A round's parts are its length / n rounded up to whole cache lines, the last one
// shorter (the split two_shot.cpp makes).
size_t allReduceReadBytes(size_t count, size_t esize, int n, int rank, int q) {
  const size_t perRound = kWindowBytes / esize;
  const size_t align = 64 / esize;
  auto part = [&](size_t len, int who) {
    const size_t each = ((len + n - 1) / n + align - 1) / align * align;
    return std::min(len, (who + 1) * each) - std::min(len, who * each);
  };
  size_t bytes = 0;
  for (size_t begin = perRound; begin < count; begin += perRound) {
    const size_t len = std::min(perRound, count - begin);
    bytes += (part(len, rank) + part(len, q)) * esize;
  }
  return bytes;
}

enum Reduction { kAllReduce, kReduceScatter, kReduce };

// Reduce-scatter, all-reduce and reduce on trncclMemAlloc buffers, at sizes of two window rounds
// and more (uneven ones): every type x op against the serial reference, in and out of place, and
// what each rank read straight out of its peers' allocations. With `ordinaryRank` >= 0 that
// rank's buffers are ordinary memory in every other call: then every rank takes the windows
// (nothing read from peers), whatever its own buffers are, and the forms alternate.
void sharedReductions(int n, int ordinaryRank, bool everyType) {
  auto outcomes = withComm(
      n,
      [](int) {
        setenv("TRNCCL_ALGO", "direct", 1);
        setenv("TRNCCL_SHM_CHUNK_BYTES", std::to_string(kWindowBytes).c_str(), 1);
      },
      [&](Failures& f, trncclComm_t comm, int rank, int) {
        constexpr size_t kMaxBytes = 4 << 20;
        char* shared[2] = {nullptr, nullptr};
        for (char*& p : shared)
          if (trncclMemAlloc(reinterpret_cast<void**>(&p), kMaxBytes + kGuardBytes) !=
              trncclSuccess)
            return f.add("alloc: %s", trncclGetLastError(nullptr));
        std::vector<char> ordinary[2] = {std::vector<char>(kMaxBytes + kGuardBytes),
                                         std::vector<char>(kMaxBytes + kGuardBytes)};
        std::vector<Bytes> inputs(n);
        Bytes want;
        int call = 0;
        const std::vector<trncclDataType_t> types =
            everyType ? reducibleTypes()
                      : std::vector<trncclDataType_t>{trncclFloat32, trncclBfloat16};
        const std::vector<trncclRedOp_t> ops =
            everyType ? allOps() : std::vector<trncclRedOp_t>{trncclSum, trncclAvg};
        for (auto t : types)
          for (auto op : ops)
            for (bool inPlace : {false, true})
              for (Reduction which : {kAllReduce, kReduceScatter, kReduce}) {
                const bool reduceScatter = which == kReduceScatter;
                const int root = static_cast<int>(call % n);  // reduce's
                const size_t esize = typeSize(t);
                // All-reduce: 2+ rounds of the 256 KiB windows; reduce-scatter: blocks of 2+
                // sub-blocks (256 KiB / n) each.
                const size_t count = (reduceScatter ? (300u << 10) / n : (600u << 10)) / esize + 5;
                const size_t total = reduceScatter ? count * n : count;
                const bool mixed = ordinaryRank >= 0 && call++ % 2 == 0;
                const bool mine = !(mixed && rank == ordinaryRank);
                char* send = mine ? shared[0] : ordinary[0].data();
                char* recv = mine ? shared[1] : ordinary[1].data();
                const char* names[] = {"all-reduce ", "reduce-scatter ", "reduce "};
                const std::string what =
                    std::string(names[which]) + typeName(t) + " " + opName(op) +
                    (inPlace ? " in place" : " out of place") +
                    (mixed ? " (rank " + std::to_string(ordinaryRank) + " ordinary)" : "") +
                    " rank " + std::to_string(rank);
                const uint64_t salt = saltOf(t, op, count) + 3 + 2 * which;
                for (int q = 0; q < n; ++q) makeInput(inputs[q], t, op, q, total, salt);
                std::vector<const Bytes*> sources;
                for (const Bytes& in : inputs) sources.push_back(&in);
                reduceReference(want, t, op, sources, reduceScatter ? rank * count : 0, count);
                // in place, the input is where the output goes (reduce-scatter: its block)
                char* input = inPlace ? recv : send;
                char* output = inPlace && reduceScatter ? recv + rank * count * esize : recv;
                std::memcpy(input, inputs[rank].data(), total * esize);
                // guard bytes after everything the call may touch in recv
                const size_t outEnd = inPlace ? total * esize : count * esize;
                std::memset(recv + outEnd, kGuardByte, kGuardBytes);
                auto before = trafficOf(f, comm, n);
                trncclResult_t rc =
                    which == kReduceScatter ? trncclReduceScatter(input, output, count, t, op, comm)
                    : which == kReduce      ? trncclReduce(input, output, count, t, op, root, comm)
                                            : trncclAllReduce(input, output, count, t, op, comm);
                if (rc != trncclSuccess)
                  return f.add("%s: %s", what.c_str(), trncclGetLastError(nullptr));
                if (which != kReduce || rank == root)
                  expectSame(f, what, output, want.data(), count, t);
                if (inPlace && reduceScatter)  // the other blocks of the input stay as they were
                  for (int q = 0; q < n; ++q)
                    if (q != rank)
                      expectSame(f, what + " (block " + std::to_string(q) + " of the input)",
                                 recv + q * count * esize, inputs[rank].data() + q * count * esize,
                                 count, t);
                for (size_t i = 0; i < kGuardBytes; ++i)
                  if (recv[outEnd + i] != kGuardByte) {
                    f.add("%s wrote past the end", what.c_str());
                    break;
                  }
                const size_t rounds = (count * esize + kWindowBytes - 1) / kWindowBytes;
                // Reduce on up to 4 ranks: the root reduces every round after the first out of
                // its peers' inputs (collectives/reduce/direct.cpp, RootReduceRounds); on more,
                // the two-shot form, in which every rank reduces its parts of every input.
                const bool rootReads = which == kReduce && n <= 4;
                const unsigned reads = mixed || (rootReads && rank != root) ? 0
                                       : reduceScatter                      ? 1
                                       : which == kReduce                   ? rounds - 1
                                                                            : 2 * (rounds - 1);
                expectReadsSince(f, what, comm, rank, n, before, reads, [&](int q) {
                  // its block of q's input after round 0's sub-block (the windows')
                  if (reduceScatter) return count * esize - subBlockBytes(n, esize);
                  // the root: each peer's input after round 0 (the windows')
                  if (rootReads) return count * esize - kWindowBytes;
                  // reduce: this rank's parts of q's input (they go to the root by the windows)
                  if (which == kReduce) return allReduceReadBytes(count, esize, n, rank, rank) / 2;
                  return allReduceReadBytes(count, esize, n, rank, q);
                });
                if (f.count() > 0) return;
              }
        for (char* p : shared) trncclMemFree(p);
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

TEST(MemAlloc, ReductionsReadPeersAllocationsThreeRanksEveryTypeAndOp) {
  sharedReductions(3, -1, true);
}

TEST(MemAlloc, ReductionsReadPeersAllocationsTwoAndFourRanks) {
  sharedReductions(2, -1, false);
  sharedReductions(4, -1, false);
}

TEST(MemAlloc, ReductionsTakeTheWindowsWhenOneRanksBuffersAreOrdinary) {
  sharedReductions(3, 1, false);
  sharedReductions(3, 0, false);
}

// All-gather, all-to-all(v) and broadcast on trncclMemAlloc buffers beyond the CMA band (here
// the band is empty: TRNCCL_CMA_MAX_BYTES on local rank 0 binds the node), 3 window rounds and
// more: round 0 goes through the windows (all-to-all-v: it is staged, unused), the rest is read
// out of the peers' allocations, once per peer (the traffic counters), with the results
// checked, in and out of place. An all-to-all
// in place takes the windows (nothing read). With `ordinaryRank` >= 0 that rank's buffers are
// ordinary memory: every rank then takes the windows, except that a broadcast reads the root's
// buffer whenever the root's is shared.
void sharedDataMovement(int n, int ordinaryRank) {
  auto outcomes = withComm(
      n,
      [](int) {
        setenv("TRNCCL_ALGO", "direct", 1);
        setenv("TRNCCL_SHM_CHUNK_BYTES", std::to_string(kWindowBytes).c_str(), 1);
        setenv("TRNCCL_CMA_MAX_BYTES", "64K", 1);  // no block in the CMA band
      },
      [&](Failures& f, trncclComm_t comm, int rank, int) {
        constexpr size_t kBlock = 600 << 10;      // bytes per rank (all-gather, broadcast)
        constexpr size_t kPeerBlock = 200 << 10;  // bytes per peer (all-to-all)
        const size_t total = std::max(n * kBlock, n * kPeerBlock);
        const bool mine = rank != ordinaryRank;
        float* shared[2] = {nullptr, nullptr};
        for (float*& p : shared)
          if (trncclMemAlloc(reinterpret_cast<void**>(&p), total) != trncclSuccess)
            return f.add("alloc: %s", trncclGetLastError(nullptr));
        std::vector<float> ordinary[2] = {std::vector<float>(total / sizeof(float)),
                                          std::vector<float>(total / sizeof(float))};
        float* send = mine ? shared[0] : ordinary[0].data();
        float* recv = mine ? shared[1] : ordinary[1].data();
        auto value = [](int r, size_t i) { return static_cast<float>(r * 1000003 + i % 100003); };
        auto expectFloats = [&](const std::string& what, const float* got, size_t count,
                                auto want) {
          for (size_t i = 0; i < count; ++i)
            if (got[i] != want(i))
              return f.add("%s: element %zu is %g, expected %g", what.c_str(), i, got[i], want(i));
        };
        const size_t count = kBlock / sizeof(float), peerCount = kPeerBlock / sizeof(float);
        const bool allShared = ordinaryRank < 0;
        for (bool inPlace : {false, true}) {
          const std::string tag = inPlace ? " in place" : " out of place";
          // all-gather
          float* input = inPlace ? recv + rank * count : send;
          for (size_t i = 0; i < count; ++i) input[i] = value(rank, i);
          auto before = trafficOf(f, comm, n);
          if (trncclAllGather(input, recv, count, trncclFloat32, comm) != trncclSuccess)
            return f.add("all-gather%s: %s", tag.c_str(), trncclGetLastError(nullptr));
          expectFloats("all-gather" + tag, recv, n * count,
                       [&](size_t i) { return value(static_cast<int>(i / count), i % count); });
          expectReadsSince(f, "all-gather" + tag, comm, rank, n, before, allShared ? 1 : 0,
                           [](int) { return kBlock - kWindowBytes; });
          // all-to-all: block q of rank r's input is value(r, q * peerCount + i)
          input = inPlace ? recv : send;
          for (size_t i = 0; i < n * peerCount; ++i) input[i] = value(rank, i);
          before = trafficOf(f, comm, n);
          if (trncclAllToAll(input, recv, peerCount, trncclFloat32, comm) != trncclSuccess)
            return f.add("all-to-all%s: %s", tag.c_str(), trncclGetLastError(nullptr));
          expectFloats("all-to-all" + tag, recv, n * peerCount, [&](size_t i) {
            return value(static_cast<int>(i / peerCount), rank * peerCount + i % peerCount);
          });
          expectReadsSince(f, "all-to-all" + tag, comm, rank, n, before,
                           allShared && !inPlace ? 1 : 0,
                           [&](int) { return kPeerBlock - subBlockBytes(n, sizeof(float)); });
          // all-to-all-v, out of place (in place is refused): uneven blocks of 150-175 KiB,
          // the largest beyond one round of the windows' sub-blocks
          if (!inPlace) {
            auto countOf = [&](int from, int to) {
              return (150u << 10) / sizeof(float) + 1000 * (from + 2 * to);
            };
            std::vector<size_t> sendCounts(n), sendDispls(n), recvCounts(n), recvDispls(n);
            for (int q = 0, s = 0, r = 0; q < n; s += sendCounts[q], r += recvCounts[q], ++q) {
              sendCounts[q] = countOf(rank, q), sendDispls[q] = s;
              recvCounts[q] = countOf(q, rank), recvDispls[q] = r;
            }
            for (int q = 0; q < n; ++q)
              for (size_t i = 0; i < sendCounts[q]; ++i)
                send[sendDispls[q] + i] = value(rank, q * 1000000 + i);
            before = trafficOf(f, comm, n);
            if (trncclAllToAllv(send, sendCounts.data(), sendDispls.data(), recv, recvCounts.data(),
                                recvDispls.data(), trncclFloat32, comm) != trncclSuccess)
              return f.add("all-to-all-v: %s", trncclGetLastError(nullptr));
            for (int q = 0; q < n; ++q)
              expectFloats("all-to-all-v block from " + std::to_string(q), recv + recvDispls[q],
                           recvCounts[q], [&](size_t i) { return value(q, rank * 1000000 + i); });
            expectReadsSince(f, "all-to-all-v", comm, rank, n, before, allShared ? 1 : 0,
                             [&](int q) { return recvCounts[q] * sizeof(float); });
          }
          // broadcast from every root in turn
          for (int root = 0; root < n; ++root) {
            const std::string what = "broadcast from " + std::to_string(root) + tag;
            input = inPlace ? recv : send;
            for (size_t i = 0; i < count; ++i) input[i] = rank == root ? value(root, i) : -1.0f;
            if (!inPlace) std::fill(recv, recv + count, -2.0f);
            before = trafficOf(f, comm, n);
            if (trncclBroadcast(input, recv, count, trncclFloat32, root, comm) != trncclSuccess)
              return f.add("%s: %s", what.c_str(), trncclGetLastError(nullptr));
            expectFloats(what, recv, count, [&](size_t i) { return value(root, i); });
            // only the root's buffer matters; only non-roots read, and only from the root
            std::vector<trncclPeerTraffic_t> after = trafficOf(f, comm, n);
            for (int q = 0; q < n; ++q) {
              if (q == rank) continue;
              const bool reads = q == root && root != ordinaryRank;
              const unsigned long long want = reads ? kBlock - kWindowBytes : 0;
              if (after[q].recvBytes - before[q].recvBytes != want ||
                  after[q].recvMessages - before[q].recvMessages != (reads ? 1u : 0u))
                f.add("%s: read %llu bytes from rank %d, expected %llu", what.c_str(),
                      after[q].recvBytes - before[q].recvBytes, q, want);
            }
          }
          if (f.count() > 0) return;
        }
        for (float* p : shared) trncclMemFree(p);
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

TEST(MemAlloc, DataMovementReadsPeersAllocationsBeyondTheCmaBand) {
  sharedDataMovement(3, -1);
  sharedDataMovement(2, -1);
}

TEST(MemAlloc, DataMovementTakesTheWindowsWhenOneRanksBuffersAreOrdinary) {
  sharedDataMovement(3, 1);
}

// Rounding happens here (random floats): an all-reduce read out of peers' allocations gives
// the same bits as the windows form, since both reduce every element in rank order.
TEST(MemAlloc, SharedAllReduceGivesTheWindowsBits) {
  auto outcomes = withComm(
      3, [](int) { setenv("TRNCCL_ALGO", "direct", 1); },
      [](Failures& f, trncclComm_t comm, int rank, int) {
        constexpr size_t kCount = (1 << 20) / sizeof(float) + 37;
        const Bytes input = makeRandomFloats(rank, kCount, 99);
        float* send = nullptr;
        float* recv = nullptr;
        if (trncclMemAlloc(reinterpret_cast<void**>(&send), kCount * sizeof(float)) ||
            trncclMemAlloc(reinterpret_cast<void**>(&recv), kCount * sizeof(float)))
          return f.add("alloc: %s", trncclGetLastError(nullptr));
        std::memcpy(send, input.data(), input.size());
        std::vector<float> windows(kCount);
        if (trncclAllReduce(input.data(), windows.data(), kCount, trncclFloat32, trncclSum, comm) !=
                trncclSuccess ||
            trncclAllReduce(send, recv, kCount, trncclFloat32, trncclSum, comm) != trncclSuccess)
          return f.add("all-reduce: %s", trncclGetLastError(nullptr));
        if (std::memcmp(recv, windows.data(), kCount * sizeof(float)) != 0)
          f.add("the single-copy all-reduce differs from the windows' in some bit");
        trncclMemFree(send);
        trncclMemFree(recv);
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

}  // namespace
}  // namespace trnccl::testing
