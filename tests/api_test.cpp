// Non-blocking requests, groups, split, the C++ wrapper, and thread safety: several
// communicators driven from several threads, and one communicator fed by a background thread
// while another thread polls its requests.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

#include "support/sweep.hpp"
#include "trnccl/trnccl.hpp"

namespace trnccl::testing {
namespace {

TEST(Requests, AsyncCallsCompleteInOrderAndTestPolls) {
  auto outcomes = runRanks(3, [](int rank, int n, const trncclUniqueId& id) {
    trncclComm_t comm;
    std::string error = initComm(&comm, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    constexpr int kCalls = 8;
    constexpr size_t kCount = 100000;
    std::vector<std::vector<int32_t>> send(kCalls), recv(kCalls);
    std::vector<trncclRequest_t> requests(kCalls);
    for (int c = 0; c < kCalls; ++c) {
      send[c].assign(kCount, rank + c);
      recv[c].assign(kCount, -1);
      if (trncclAllReduceAsync(send[c].data(), recv[c].data(), kCount, trncclInt32, trncclSum, comm,
                               &requests[c]) != trncclSuccess)
        f.add("async call %d failed: %s", c, trncclGetLastError(comm));
    }
    // Poll the last one with trncclTest, wait for the rest.
    int done = 0;
    int polls = 0;
    while (!done && polls < 100000000) {
      if (trncclTest(&requests[kCalls - 1], &done) != trncclSuccess) {
        f.add("trncclTest failed: %s", trncclGetLastError(comm));
        break;
      }
      ++polls;
    }
    if (requests[kCalls - 1] != nullptr) f.add("a finished request was not released");
    for (int c = 0; c < kCalls - 1; ++c)
      if (trncclWait(&requests[c], TRNCCL_TIMEOUT_DEFAULT) != trncclSuccess)
        f.add("wait %d failed: %s", c, trncclGetLastError(comm));
    for (int c = 0; c < kCalls; ++c) {
      int32_t want = (0 + 1 + 2) + n * c;
      if (recv[c][0] != want || recv[c][kCount - 1] != want)
        f.add("call %d: got %d, want %d", c, recv[c][0], want);
    }
    trncclCommDestroy(comm);
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

TEST(Requests, WaitWithShortTimeoutLeavesTheRequestValid) {
  auto outcomes = runRanks(2, [](int rank, int n, const trncclUniqueId& id) {
    trncclComm_t comm;
    std::string error = initComm(&comm, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    int x = rank + 1, y = 0;
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    trncclRequest_t request = nullptr;
    if (trncclAllReduceAsync(&x, &y, 1, trncclInt32, trncclSum, comm, &request) != trncclSuccess)
      f.add("async failed");
    if (rank == 0) {
      trncclResult_t rc = trncclWait(&request, 10);
      if (rc != trncclTimeout || request == nullptr)
        f.add("a 10 ms wait on a peer that sleeps 300 ms returned %s", trncclGetErrorString(rc));
    }
    if (trncclWait(&request, 20000) != trncclSuccess || y != 3)
      f.add("second wait failed or wrong result %d: %s", y, trncclGetLastError(comm));
    trncclCommDestroy(comm);
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

TEST(Groups, LargeSendRecvRingsDoNotDeadlock) {
  auto outcomes = runRanks(4, [](int rank, int n, const trncclUniqueId& id) {
    trncclComm_t comm;
    std::string error = initComm(&comm, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    // 8 MiB each way to both neighbours: far beyond the rings' buffering, so only concurrent
    // progress of the four calls completes it.
    const size_t count = 2 << 20;
    std::vector<float> toNext(count, rank), toPrev(count, rank + 100), fromPrev(count),
        fromNext(count);
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    trncclGroupStart();
    trncclSend(toNext.data(), count, trncclFloat32, next, comm);
    trncclSend(toPrev.data(), count, trncclFloat32, prev, comm);
    trncclRecv(fromPrev.data(), count, trncclFloat32, prev, comm);
    trncclRecv(fromNext.data(), count, trncclFloat32, next, comm);
    if (trncclGroupEnd() != trncclSuccess) f.add("group failed: %s", trncclGetLastError(comm));
    if (fromPrev[count - 1] != prev || fromNext[0] != next + 100)
      f.add("wrong data: %f %f", fromPrev[count - 1], fromNext[0]);
    // Nested groups launch at the outermost end; collectives in a group run in order.
    int one = 1, total = 0;
    trncclGroupStart();
    trncclGroupStart();
    trncclAllReduce(&one, &total, 1, trncclInt32, trncclSum, comm);
    trncclGroupEnd();
    if (total != 0) f.add("a grouped call ran before the outermost GroupEnd");
    if (trncclGroupEnd() != trncclSuccess || total != n) f.add("grouped all-reduce gave %d", total);
    trncclRequest_t request;
    trncclGroupStart();
    if (trncclAllReduceAsync(&one, &total, 1, trncclInt32, trncclSum, comm, &request) !=
        trncclInvalidUsage)
      f.add("an async call inside a group was accepted");
    trncclGroupEnd();
    trncclCommDestroy(comm);
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

TEST(Groups, CallsOnTwoCommunicatorsThatWaitForEachOtherComplete) {
  // Rank 0 sends on A and receives on B; rank 1 sends on B and receives on A, each 8 MiB, far
  // beyond the rings' buffering. A group that waited for its communicators one after the other
  // would deadlock: each rank's first send needs the other rank's second call to drain it.
  auto outcomes = runRanks(2, [](int rank, int n, const trncclUniqueId& id) {
    trncclComm_t world;
    std::string error = initComm(&world, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    trncclComm_t a = nullptr, b = nullptr;
    if (trncclCommSplit(world, 0, rank, &a, nullptr) != trncclSuccess ||
        trncclCommSplit(world, 0, rank, &b, nullptr) != trncclSuccess)
      return std::string("split failed");
    const size_t count = 2 << 20;
    std::vector<float> out(count), in(count, -1.0f);
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(rank * 1000003 + i % 4093);
    const int peer = 1 - rank;
    trncclGroupStart();
    trncclSend(out.data(), count, trncclFloat32, peer, rank == 0 ? a : b);
    trncclRecv(in.data(), count, trncclFloat32, peer, rank == 0 ? b : a);
    if (trncclGroupEnd() != trncclSuccess) f.add("group failed: %s", trncclGetLastError(world));
    for (size_t i = 0; i < count; ++i)
      if (in[i] != static_cast<float>(peer * 1000003 + i % 4093)) {
        f.add("element %zu is %f", i, in[i]);
        break;
      }
    trncclCommDestroy(a);
    trncclCommDestroy(b);
    trncclCommDestroy(world);
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

TEST(Split, ColorsKeysAndNoColor) {
  auto outcomes = runRanks(5, [](int rank, int n, const trncclUniqueId& id) {
    trncclComm_t comm;
    std::string error = initComm(&comm, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    // Ranks 0..3 split by parity with reversed keys; rank 4 joins nothing.
    int color = rank == 4 ? TRNCCL_SPLIT_NOCOLOR : rank % 2;
    trncclComm_t child = nullptr;
    if (trncclCommSplit(comm, color, -rank, &child, nullptr) != trncclSuccess)
      f.add("split failed: %s", trncclGetLastError(comm));
    if (rank == 4) {
      if (child != nullptr) f.add("NOCOLOR produced a communicator");
    } else if (child) {
      int childRank = -1, childSize = 0;
      trncclCommUserRank(child, &childRank);
      trncclCommCount(child, &childSize);
      int wantRank = rank < 2 ? 1 : 0;  // keys are -rank: the higher parent rank comes first
      if (childSize != 2 || childRank != wantRank)
        f.add("child rank %d/%d, want %d/2", childRank, childSize, wantRank);
      int value = rank, sum = 0;
      if (trncclAllReduce(&value, &sum, 1, trncclInt32, trncclSum, child) != trncclSuccess ||
          sum != (rank % 2 == 0 ? 0 + 2 : 1 + 3))
        f.add("child all-reduce gave %d", sum);
      trncclCommDestroy(child);
    }
    // The parent still works after the split.
    int one = 1, total = 0;
    if (trncclAllReduce(&one, &total, 1, trncclInt32, trncclSum, comm) != trncclSuccess ||
        total != n)
      f.add("parent all-reduce after split gave %d", total);
    trncclCommDestroy(comm);
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// Shared memory needs no registration, but the handles are still this communicator's: one
// given out by another communicator, or released already, is refused.
TEST(Registration, HandlesBelongToTheCommunicatorThatGaveThemOut) {
  auto outcomes = runRanks(2, [](int rank, int n, const trncclUniqueId& id) {
    trncclComm_t world;
    std::string error = initComm(&world, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    trncclComm_t other = nullptr;
    trncclCommSplit(world, 0, rank, &other, nullptr);
    std::vector<int32_t> data(4096, rank + 1), sum(4096);
    void* handle = nullptr;
    if (trncclCommRegister(world, data.data(), data.size() * 4, &handle) != trncclSuccess ||
        !handle)
      f.add("register failed: %s", trncclGetLastError(world));
    if (trncclAllReduce(data.data(), sum.data(), data.size(), trncclInt32, trncclSum, world) !=
            trncclSuccess ||
        sum[4095] != n * (n + 1) / 2)
      f.add("all-reduce on a registered buffer gave %d", sum[4095]);
    if (trncclCommDeregister(other, handle) != trncclInvalidArgument)
      f.add("another communicator released this one's handle");
    if (trncclCommDeregister(world, handle) != trncclSuccess)
      f.add("deregister failed: %s", trncclGetLastError(world));
    if (trncclCommDeregister(world, handle) != trncclInvalidArgument)
      f.add("a handle was released twice");
    if (trncclCommDeregister(world, nullptr) != trncclInvalidArgument)
      f.add("a NULL handle was accepted");
    trncclCommDestroy(other);
    trncclCommDestroy(world);
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

TEST(Threads, SeveralCommunicatorsFromSeveralThreads) {
  // Each process runs three communicators at once, one per thread: the parent and two splits.
  auto outcomes = runRanks(3, [](int rank, int n, const trncclUniqueId& id) {
    trncclComm_t world;
    std::string error = initComm(&world, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    trncclComm_t a = nullptr, b = nullptr;
    trncclCommSplit(world, 0, rank, &a, nullptr);
    trncclCommSplit(world, 0, -rank, &b, nullptr);
    std::atomic<int> failures{0};
    auto hammer = [&](trncclComm_t comm, int salt) {
      std::vector<int64_t> send(4099), recv(4099);
      for (int it = 0; it < 200; ++it) {
        std::iota(send.begin(), send.end(), it + salt);
        if (trncclAllReduce(send.data(), recv.data(), send.size(), trncclInt64, trncclSum, comm) !=
                trncclSuccess ||
            recv[7] != n * (7 + it + salt))
          ++failures;
      }
    };
    std::thread t1(hammer, a, 1), t2(hammer, b, 2), t3(hammer, world, 3);
    t1.join();
    t2.join();
    t3.join();
    if (failures) f.add("%d concurrent all-reduces failed", failures.load());
    trncclCommDestroy(a);
    trncclCommDestroy(b);
    trncclCommDestroy(world);
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

TEST(Threads, BackgroundThreadIssuesWhileAnotherPolls) {
  auto outcomes = runRanks(2, [](int rank, int n, const trncclUniqueId& id) {
    trncclComm_t comm;
    std::string error = initComm(&comm, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    constexpr int kCalls = 300;
    std::vector<int32_t> send(kCalls), recv(kCalls, -1);
    std::vector<std::atomic<trncclRequest_t>> requests(kCalls);
    std::thread issuer([&] {
      for (int c = 0; c < kCalls; ++c) {
        send[c] = c * (rank + 1);
        trncclRequest_t r = nullptr;
        trncclAllReduceAsync(&send[c], &recv[c], 1, trncclInt32, trncclSum, comm, &r);
        requests[c].store(r);
      }
    });
    for (int c = 0; c < kCalls; ++c) {
      trncclRequest_t r;
      while ((r = requests[c].load()) == nullptr) std::this_thread::yield();
      int done = 0;
      while (!done)
        if (trncclTest(&r, &done) != trncclSuccess) {
          f.add("test %d failed: %s", c, trncclGetLastError(comm));
          break;
        }
      if (recv[c] != c * 3) f.add("call %d: %d != %d", c, recv[c], c * 3);
    }
    issuer.join();
    trncclCommDestroy(comm);
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

TEST(CppWrapper, RaiiAndExceptions) {
  auto outcomes = runRanks(2, [](int rank, int n, const trncclUniqueId& raw) {
    Failures f;
    try {
      trnccl::Comm comm(n, trnccl::UniqueId::fromRaw(raw), rank);
      std::vector<float> v(1000, 1.0f + rank);
      comm.allReduce(std::span<float>(v));
      if (v[999] != 3.0f) f.add("allReduce gave %f", v[999]);
      std::vector<float> gathered(2000);
      comm.allGather(std::span<const float>(v), std::span<float>(gathered));
      auto request = comm.allReduceAsync(std::span<const float>(v), std::span<float>(gathered));
      request.wait();
      if (gathered[0] != 6.0f) f.add("async allReduce gave %f", gathered[0]);
      comm.barrier();
      try {
        comm.broadcast(std::span<float>(v), 7);
        f.add("broadcast with root 7 of 2 did not throw");
      } catch (const trnccl::Error& e) {
        if (e.code() != trncclInvalidArgument || !std::strstr(e.what(), "root 7"))
          f.add("unexpected error %s", e.what());
      }
    } catch (const std::exception& e) {
      f.add("threw: %s", e.what());
    }
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// The MoE wrapper sizes element bytes from the payload: fp8 rows of 1 byte dispatched with their
// scales, combined in bf16 (2 bytes), fp64 rows of 8.
TEST(CppWrapper, MoeFp8DispatchScaledAndBf16Combine) {
  auto outcomes = runRanks(2, [](int rank, int n, const trncclUniqueId& raw) {
    Failures f;
    try {
      trnccl::Comm comm(n, trnccl::UniqueId::fromRaw(raw), rank);
      const size_t T = 3, H = 5;
      trncclEpConfig_t config = TRNCCL_EP_CONFIG_INITIALIZER;
      config.numExperts = 2;
      config.maxDispatchTokensPerRank = 4;
      config.maxRecvTokensPerRank = 8;
      config.maxTokenBytes = H;
      config.payloadType = trncclFloat8e5m2;
      config.mode = trncclEpModeNormal;
      trnccl::EpGroup group(comm, config);
      // Every token to expert 1 (rank 1): rank 1 receives both ranks' tokens.
      const std::vector<int32_t> topk(T, 1);
      auto routing = group.route(std::span<const int32_t>(topk), 1, trncclEpLayoutFlat);
      const size_t rows = routing.numRecv();
      if (rows != (rank == 1 ? 2 * T : 0)) f.add("rank %d receives %zu rows", rank, rows);
      std::vector<uint8_t> tokens(T * H);
      std::vector<float> scales(T);
      for (size_t t = 0; t < T; ++t) {
        scales[t] = static_cast<float>(rank * 10 + t);
        for (size_t h = 0; h < H; ++h)
          tokens[t * H + h] = static_cast<uint8_t>(rank * 50 + t * H + h);
      }
      std::vector<uint8_t> outTokens(2 * T * H);
      std::vector<float> outScales(2 * T), outWeights(2 * T);
      routing.dispatchScaled(std::span<const uint8_t>(tokens), std::span<const float>(scales), H,
                             std::span<const float>(), std::span<uint8_t>(outTokens),
                             std::span<float>(outScales), std::span<float>(outWeights));
      for (size_t j = 0; j < rows; ++j) {
        const size_t src = j / T, t = j % T;
        if (outScales[j] != static_cast<float>(src * 10 + t) ||
            outTokens[j * H] != static_cast<uint8_t>(src * 50 + t * H))
          f.add("row %zu: scale %g byte %d", j, outScales[j], outTokens[j * H]);
      }
      // bf16 1.0 (0x3f80) from the expert: each token comes back as 1.0.
      std::vector<uint16_t> expertOut(std::max<size_t>(rows, 1) * H, 0x3f80), out(T * H);
      routing.combine(std::span<const uint16_t>(expertOut), H, std::span<uint16_t>(out));
      if (out[0] != 0x3f80 || out[T * H - 1] != 0x3f80) f.add("combine gave %#x", out[0]);
      try {  // the fp8 group refuses the unscaled dispatch
        routing.dispatch(std::span<const uint8_t>(tokens), H, std::span<const float>(),
                         std::span<uint8_t>(outTokens), std::span<float>(outWeights));
        f.add("unscaled fp8 dispatch did not throw");
      } catch (const trnccl::Error& e) {
        if (!std::strstr(e.what(), "trncclEpDispatchScaled")) f.add("unexpected: %s", e.what());
      }
    } catch (const std::exception& e) {
      f.add("threw: %s", e.what());
    }
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

TEST(Determinism, AllReduceBitwiseEqualOnEveryRankAndRun) {
  for (const char* algo : {"direct", "ring"}) {
    std::string algorithm = algo;
    auto outcomes = runRanks(5, [&](int rank, int n, const trncclUniqueId& id) {
      setenv("TRNCCL_ALGO", algorithm.c_str(), 1);
      trncclComm_t comm;
      std::string error = initComm(&comm, n, id, rank);
      if (!error.empty()) return error;
      Failures f;
      for (auto t : {trncclFloat32, trncclBfloat16, trncclFloat16}) {
        const size_t count = 300007;
        Bytes in = makeRandomFloats(rank, count, 42), narrow(count * typeSize(t));
        for (size_t i = 0; i < count; ++i) {  // random values, so every addition rounds
          float v;
          std::memcpy(&v, in.data() + 4 * i, 4);
          if (t == trncclFloat32)
            std::memcpy(narrow.data() + 4 * i, &v, 4);
          else if (t == trncclFloat16) {
            _Float16 h = static_cast<_Float16>(v);
            std::memcpy(narrow.data() + 2 * i, &h, 2);
          } else {
            uint32_t b;
            std::memcpy(&b, &v, 4);
            uint16_t h = b >> 16;
            std::memcpy(narrow.data() + 2 * i, &h, 2);
          }
        }
        size_t bytes = narrow.size();
        Bytes first(bytes), second(bytes), everyone(bytes * n);
        trncclAllReduce(narrow.data(), first.data(), count, t, trncclSum, comm);
        trncclAllReduce(narrow.data(), second.data(), count, t, trncclSum, comm);
        if (first != second) f.add("%s %s: two runs differ", algo, typeName(t));
        trncclAllGather(first.data(), everyone.data(), bytes, trncclUint8, comm);
        for (int q = 0; q < n; ++q)
          if (std::memcmp(everyone.data() + q * bytes, first.data(), bytes) != 0)
            f.add("%s %s: rank %d's result differs from rank %d's", algo, typeName(t), q, rank);
      }
      trncclCommDestroy(comm);
      return f.text();
    });
    EXPECT_ALL_RANKS_OK(outcomes);
  }
}

TEST(SmallMessages, EveryLineCountOfTheSmallMessageProtocol) {
  // The sweep covers one and two lines (the default threshold); here every line count up to
  // the protocol's 16, with every type and op, against the reference.
  auto outcomes = runRanks(3, [](int rank, int n, const trncclUniqueId& id) {
    setenv("TRNCCL_LL_MAX_BYTES", "896", 1);
    trncclComm_t comm;
    std::string error = initComm(&comm, n, id, rank);
    if (!error.empty()) return error;
    Failures f;
    std::vector<Bytes> inputs(n);
    std::vector<const Bytes*> ptrs;
    for (auto& b : inputs) ptrs.push_back(&b);
    Bytes want, out;
    for (auto t : reducibleTypes())
      for (auto op : allOps())
        for (size_t bytes = typeSize(t); bytes <= 896; bytes += 56 + typeSize(t)) {
          size_t count = bytes / typeSize(t);
          for (int q = 0; q < n; ++q) makeInput(inputs[q], t, op, q, count, bytes);
          reduceReference(want, t, op, ptrs, 0, count);
          out.assign(count * typeSize(t), 0);
          if (trncclAllReduce(inputs[rank].data(), out.data(), count, t, op, comm) !=
              trncclSuccess) {
            f.add("all-reduce of %zu bytes failed: %s", bytes, trncclGetLastError(comm));
            return f.text();
          }
          expectSame(f,
                     std::string("small ") + typeName(t) + " " + opName(op) + " " +
                         std::to_string(bytes) + " B",
                     out.data(), want.data(), count, t);
        }
    trncclCommDestroy(comm);
    return f.text();
  });
  EXPECT_ALL_RANKS_OK(outcomes);
}

TEST(SmallMessages, AllToAllThroughTheLinesAtEveryBlockSize) {
  // An all-to-all whose peers' blocks fit the lines sends them there, each block on lines of
  // its own (shm::llAllToAllFirstLine). Every block size up to the protocol's 16 lines, for 2,
  // 3 and 5 ranks, in and out of place, against the serial answer: block q of rank r's output
  // is block r of rank q's input. Blocks that no longer fit take the windows (covered too).
  for (int n : {2, 3, 5}) {
    auto outcomes = runRanks(n, [](int rank, int nranks, const trncclUniqueId& id) {
      setenv("TRNCCL_LL_MAX_BYTES", "896", 1);
      setenv("TRNCCL_ALGO", "alltoall:direct", 1);  // the lines are the direct schedule's
      trncclComm_t comm;
      std::string error = initComm(&comm, nranks, id, rank);
      if (!error.empty()) return error;
      Failures f;
      auto valueOf = [](int from, int to, size_t i) {
        return static_cast<uint8_t>(from * 41 + to * 7 + i * 13 + 1);
      };
      for (size_t block = 1; block <= 896 / static_cast<size_t>(nranks - 1) + 64; block += 9)
        for (bool inPlace : {false, true}) {
          std::vector<uint8_t> in(block * nranks), out(block * nranks, 0xEE);
          for (int to = 0; to < nranks; ++to)
            for (size_t i = 0; i < block; ++i) in[to * block + i] = valueOf(rank, to, i);
          uint8_t* recv = inPlace ? in.data() : out.data();
          if (trncclAllToAll(in.data(), recv, block, trncclUint8, comm) != trncclSuccess) {
            f.add("all-to-all of %zu B per rank failed: %s", block, trncclGetLastError(comm));
            return f.text();
          }
          for (int from = 0; from < nranks; ++from)
            for (size_t i = 0; i < block; ++i)
              if (recv[from * block + i] != valueOf(from, rank, i)) {
                f.add("%zu B per rank, %s: byte %zu of rank %d's block is %u, want %u", block,
                      inPlace ? "in place" : "out of place", i, from,
                      static_cast<unsigned>(recv[from * block + i]),
                      static_cast<unsigned>(valueOf(from, rank, i)));
                from = nranks;
                break;
              }
        }
      trncclCommDestroy(comm);
      return f.text();
    });
    EXPECT_ALL_RANKS_OK(outcomes);
  }
}

TEST(LargeMessages, AllReduce64MiB) {
  for (const char* algo : {"direct", "ring"}) {
    std::string algorithm = algo;
    auto outcomes = runRanks(2, [&](int rank, int n, const trncclUniqueId& id) {
      setenv("TRNCCL_ALGO", algorithm.c_str(), 1);
      trncclComm_t comm;
      std::string error = initComm(&comm, n, id, rank);
      if (!error.empty()) return error;
      Failures f;
      const size_t count = (64u << 20) / sizeof(float);
      Bytes want;
      std::vector<Bytes> inputs(n);
      std::vector<const Bytes*> ptrs;
      for (int q = 0; q < n; ++q) {
        makeInput(inputs[q], trncclFloat32, trncclSum, q, count, 64);
        ptrs.push_back(&inputs[q]);
      }
      reduceReference(want, trncclFloat32, trncclSum, ptrs, 0, count);
      Bytes out(count * 4);
      if (trncclAllReduce(inputs[rank].data(), out.data(), count, trncclFloat32, trncclSum, comm) !=
          trncclSuccess)
        f.add("%s: 64 MiB all-reduce failed: %s", algorithm.c_str(), trncclGetLastError(comm));
      expectSame(f, algorithm + " 64 MiB all-reduce", out.data(), want.data(), count,
                 trncclFloat32);
      trncclCommDestroy(comm);
      return f.text();
    });
    EXPECT_ALL_RANKS_OK(outcomes);
  }
}

}  // namespace
}  // namespace trnccl::testing
