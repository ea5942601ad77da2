// trncclMemAlloc / trncclMemFree: misuse is refused with a clear error, an allocation a queued
// call uses cannot be freed, a peer can map an allocation (the path the single-copy schedules
// take for such buffers), and every collective gives the serial reference's result on such
// buffers, in and out of place, at sizes that take the single-copy forms.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
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

}  // namespace
}  // namespace trnccl::testing
