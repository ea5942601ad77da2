// CMA (single copy) on real rank processes: where the kernel lets ranks read each other (this
// machine) the direct all-to-all and all-to-all-v read each peer's block out of its buffer
// (the traffic counters count CMA reads as received messages, and do not count window reads),
// TRNCCL_CMA=0 on the node's local rank 0 turns it off for every rank of the node, and blocks
// of TRNCCL_CMA_MAX_BYTES and more go through the windows. The results of every single-copy
// schedule are checked against the serial reference by collectives_test's "cma"
// configuration.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "support/sweep.hpp"
#include "transports/shm/cma.hpp"

namespace trnccl::testing {
namespace {

// What this rank read from each peer, by the traffic counters: one CMA read of bytesFrom(q)
// bytes per peer when CMA is expected, nothing otherwise (window reads are not counted).
void expectReads(Failures& f, trncclComm_t comm, int rank, int n, bool expectCma,
                 const std::function<size_t(int)>& bytesFrom) {
  std::vector<trncclPeerTraffic_t> traffic(n);
  int count = 0;
  if (trncclCommGetPeerTraffic(comm, traffic.data(), n, &count) != trncclSuccess) {
    f.add("traffic: %s", trncclGetLastError(comm));
    return;
  }
  for (int q = 0; q < n; ++q) {
    if (q == rank) continue;
    const unsigned long long want = expectCma ? bytesFrom(q) : 0;
    if (traffic[q].recvBytes != want || traffic[q].recvMessages != (expectCma ? 1u : 0u))
      f.add("from rank %d: %llu bytes in %llu reads, expected %llu bytes (CMA %s)", q,
            traffic[q].recvBytes, traffic[q].recvMessages, want, expectCma ? "on" : "off");
  }
}

// A 3-rank direct all-to-all of 1 MiB blocks (all-to-all keeps the 64 KiB threshold when
// ranks outnumber cores, as 3 do on a 2-core machine); every rank checks the data and what it
// read from each peer by CMA. The largest block is set (rank0MaxBytes on local rank 0, which
// binds the node; 1G unless given), since init's timing of the kernel's copy may leave every
// block to the windows on a machine whose kernel copies slowly.
void allToAllReads(const char* rank0Cma, const char* othersCma, bool expectCma,
                   const char* rank0MaxBytes = "1G") {
  constexpr size_t kCount = 1 << 18;  // floats: 1 MiB per block, above TRNCCL_CMA_MIN_BYTES
  auto outcomes = withComm(
      3,
      [&](int rank) {
        setenv("TRNCCL_ALGO", "direct", 1);
        const char* cma = rank == 0 ? rank0Cma : othersCma;
        if (cma) setenv("TRNCCL_CMA", cma, 1);
        setenv("TRNCCL_CMA_MAX_BYTES", rank == 0 ? rank0MaxBytes : "1G", 1);
      },
      [&](Failures& f, trncclComm_t comm, int rank, int n) {
        // Element i of the block rank r sends to rank q: r * 1000003 + q * 1009 + i.
        std::vector<float> send(kCount * n), recv(kCount * n, -1.0f);
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < kCount; ++i)
            send[q * kCount + i] = static_cast<float>(rank * 1000003 + q * 1009 + i);
        if (trncclAllToAll(send.data(), recv.data(), kCount, trncclFloat32, comm) !=
            trncclSuccess) {
          f.add("all-to-all failed: %s", trncclGetLastError(nullptr));
          return;
        }
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < kCount; ++i)
            if (recv[q * kCount + i] != static_cast<float>(q * 1000003 + rank * 1009 + i)) {
              f.add("block %d element %zu is %g", q, i, recv[q * kCount + i]);
              return;
            }
        expectReads(f, comm, rank, n, expectCma, [&](int) { return kCount * sizeof(float); });
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// Working in place is each rank's own choice; the form must not depend on it alone. One rank
// in place sends every rank through the windows (its descriptor says so): the kernel copies
// nothing. Every rank out of place: each reads its peers' blocks by CMA (the test below).
TEST(Cma, AllToAllWithRanksMixingInPlaceAndOutOfPlace) {
  constexpr size_t kCount = 1 << 18;  // floats: 1 MiB blocks
  auto outcomes = withComm(
      3,
      [](int) {
        setenv("TRNCCL_ALGO", "direct", 1);
        setenv("TRNCCL_CMA_MAX_BYTES", "1G", 1);  // the single-copy form however init timed it
      },
      [&](Failures& f, trncclComm_t comm, int rank, int n) {
        std::vector<float> send(kCount * n), recv(kCount * n, -1.0f);
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < kCount; ++i)
            send[q * kCount + i] = static_cast<float>(rank * 1000003 + q * 1009 + i);
        const bool inPlace = rank != 1;  // ranks 0 and 2 in place, rank 1 out of place
        if (inPlace) recv = send;
        const uint64_t kernelBefore = shm::cmaKernelReadBytes();
        if (trncclAllToAll(inPlace ? recv.data() : send.data(), recv.data(), kCount, trncclFloat32,
                           comm) != trncclSuccess) {
          f.add("all-to-all failed: %s", trncclGetLastError(nullptr));
          return;
        }
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < kCount; ++i)
            if (recv[q * kCount + i] != static_cast<float>(q * 1000003 + rank * 1009 + i)) {
              f.add("block %d element %zu is %g (%s)", q, i, recv[q * kCount + i],
                    inPlace ? "in place" : "out of place");
              return;
            }
        const uint64_t kernelBytes = shm::cmaKernelReadBytes() - kernelBefore;
        if (kernelBytes != 0)
          f.add("the kernel copied %llu bytes of peers' memory with ranks 0 and 2 in place (%s)",
                static_cast<unsigned long long>(kernelBytes),
                inPlace ? "in place" : "out of place");
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

TEST(Cma, DirectAllToAllReadsPeersBuffers) {
  allToAllReads(nullptr, nullptr, true);
}

TEST(Cma, OffOnLocalRankZeroTurnsItOffForTheNode) {
  allToAllReads("0", "1", false);
}

TEST(Cma, OnLocalRankZeroBindsTheOthers) {
  allToAllReads("1", "0", true);
}

// 1 MiB blocks: at the largest block they go through the windows, just above it by CMA.
TEST(Cma, BlocksFromTheMaxBytesOnTakeTheWindows) {
  allToAllReads(nullptr, nullptr, false, "1M");
}
TEST(Cma, BlocksBelowTheMaxBytesAreRead) {
  allToAllReads(nullptr, nullptr, true, "2M");
}

// A 3-rank all-to-all-v whose blocks differ in size (rank r sends (r + 2q + 1) * unit floats
// to rank q, at displacements with gaps): when the largest block anywhere is in the CMA band
// every block is read out of the sender's buffer, one read per non-empty block, however small;
// when it is not, the windows carry every block and nothing is counted. The data is checked
// either way (collectives_test's "cma" configuration sweeps every type and layout).
void allToAllvReads(size_t unit, bool expectCma) {
  auto outcomes = withComm(
      3,
      [](int) {
        setenv("TRNCCL_ALGO", "direct", 1);
        setenv("TRNCCL_CMA_MAX_BYTES", "1G", 1);
      },
      [&](Failures& f, trncclComm_t comm, int rank, int n) {
        auto countOf = [&](int from, int to) { return (from + 2 * to + 1) * unit; };
        std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
        size_t sendExtent = 0, recvExtent = 0;
        for (int q = 0; q < n; ++q) {
          sc[q] = countOf(rank, q), sd[q] = sendExtent, sendExtent += sc[q] + 5;
          rc[q] = countOf(q, rank), rd[q] = recvExtent, recvExtent += rc[q] + 5;
        }
        std::vector<float> send(sendExtent), recv(recvExtent, -1.0f);
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < sc[q]; ++i)
            send[sd[q] + i] = static_cast<float>(rank * 1000003 + q * 1009 + i);
        if (trncclAllToAllv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(),
                            trncclFloat32, comm) != trncclSuccess) {
          f.add("all-to-all-v failed: %s", trncclGetLastError(nullptr));
          return;
        }
        for (int q = 0; q < n; ++q) {
          for (size_t i = 0; i < rc[q]; ++i)
            if (recv[rd[q] + i] != static_cast<float>(q * 1000003 + rank * 1009 + i)) {
              f.add("block from %d element %zu is %g", q, i, recv[rd[q] + i]);
              return;
            }
          if (recv[rd[q] + rc[q]] != -1.0f) f.add("the gap after block %d was written", q);
        }
        expectReads(f, comm, rank, n, expectCma, [&](int q) { return rc[q] * sizeof(float); });
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// Largest block 6 x 16 Ki floats = 384 KiB, smallest 64 KiB: all read by CMA.
TEST(Cma, AllToAllvReadsEveryBlockWhenTheLargestIsInTheBand) {
  allToAllvReads(16 << 10, true);
}

// Largest block 6 x 1 Ki floats = 24 KiB, below TRNCCL_CMA_MIN_BYTES (64 KiB): the windows.
TEST(Cma, AllToAllvBelowTheBandTakesTheWindows) {
  allToAllvReads(1 << 10, false);
}

// The direct all-to-all-v with counts that disagree, through the windows (small blocks) and by
// CMA (large ones): 3 ranks, rank 1 sends rank 0 one element more than rank 0 expects, and rank
// 2's own send and receive counts for itself differ. Ranks 0 and 2 report the mismatch naming
// the counts; no rank writes past a receive block (the first round is staged before the sizes
// are checked, so this also checks that it copies nothing past the smaller count).
void allToAllvMismatch(size_t unit) {
  auto outcomes = runRanks(
      3,
      [&](int rank, int n, const trncclUniqueId& id) -> std::string {
        setenv("TRNCCL_ALGO", "direct", 1);
        setenv("TRNCCL_CMA_MAX_BYTES", "1G", 1);
        setenv("TRNCCL_TIMEOUT", "10", 1);
        trncclComm_t comm = nullptr;
        std::string error = initComm(&comm, n, id, rank);
        if (!error.empty()) return error;
        std::vector<size_t> sc(n, unit), rc(n, unit), sd(n), rd(n);
        if (rank == 1) sc[0] = unit + 1;
        if (rank == 2) sc[2] = unit + 1;
        const size_t room = 2 * unit + 8;
        for (int q = 0; q < n; ++q) sd[q] = rd[q] = q * room;
        std::vector<float> in(room * n, static_cast<float>(rank)), out(room * n, -7.0f);
        trncclResult_t result = trncclAllToAllv(in.data(), sc.data(), sd.data(), out.data(),
                                                rc.data(), rd.data(), trncclFloat32, comm);
        const std::string text = trncclGetLastError(comm);
        std::string failures;
        if (rank != 1 && result == trncclSuccess)
          failures += "the mismatched all-to-all-v succeeded; ";
        const std::string want = rank == 0
                                     ? "but rank 1 sends sendcounts[0]=" + std::to_string(unit + 1)
                                     : "but rank 2 sends sendcounts[2]=" + std::to_string(unit + 1);
        if (rank != 1 && text.find(want) == std::string::npos)
          failures += "unexpected error: " + text + "; ";
        for (int q = 0; q < n; ++q)
          for (size_t i = rd[q] + unit; i < rd[q] + room; ++i)
            if (out[i] != -7.0f) {
              failures += "wrote past the block from rank " + std::to_string(q) + "; ";
              break;
            }
        trncclCommAbort(comm);
        return failures.empty() ? "" : "rank " + std::to_string(rank) + ": " + failures;
      },
      60);
  EXPECT_ALL_RANKS_OK(outcomes);
}

TEST(Cma, AllToAllvWithMismatchedCountsFailsThroughTheWindows) {
  allToAllvMismatch(1000);  // 4 KB blocks
}

TEST(Cma, AllToAllvWithMismatchedCountsFailsInTheSingleCopyForm) {
  allToAllvMismatch(64 << 10);  // 256 KiB blocks
}

// Init's rule for the largest block (shm::cmaMaxBytes).
TEST(Cma, MaxBytesFollowsTheKernelsCopySpeed) {
  constexpr uint64_t kStream = 8 << 20, kNone = UINT64_MAX;
  EXPECT_EQ(shm::cmaMaxBytes(3 << 20, 5.0, kStream, true), 3u << 20) << "set by hand: kept";
  EXPECT_EQ(shm::cmaMaxBytes(0, 0.0, kStream, false), kNone) << "not timed: no limit";
  EXPECT_EQ(shm::cmaMaxBytes(0, 1.5, kStream, true), kNone) << "a fast kernel copy: no limit";
  EXPECT_EQ(shm::cmaMaxBytes(0, 2.7, kStream, false), kStream) << "slow: streamed blocks";
  EXPECT_EQ(shm::cmaMaxBytes(0, 2.7, 0, false), kNone) << "slow, but the windows never stream";
  EXPECT_EQ(shm::cmaMaxBytes(0, 2.7, kStream, true), 0u) << "slow and oversubscribed: none";
  // Broadcast never reads by CMA where the kernel's copy was timed slow; a band set by hand
  // (not timed) and a fast kernel keep the node's band.
  EXPECT_EQ(shm::broadcastCmaMaxBytes(kStream, 2700), 0u) << "timed slow: never";
  EXPECT_EQ(shm::broadcastCmaMaxBytes(3 << 20, 0), 3u << 20) << "set by hand: kept";
  EXPECT_EQ(shm::broadcastCmaMaxBytes(kNone, 1500), kNone) << "fast kernel: no limit";
}

// The timing itself works here (it reads this process's own memory, which is always allowed)
// and lands in a plausible range: the kernel's copy is neither free nor absurdly slow.
TEST(Cma, KernelCopySlowdownIsTimed) {
  const double slowdown = shm::kernelCopySlowdown();
  EXPECT_GT(slowdown, 0.2);
  EXPECT_LT(slowdown, 100.0);
}

}  // namespace
}  // namespace trnccl::testing
