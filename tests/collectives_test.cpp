// Every collective x every data type x every op x the sweep's counts, in place and out of
// place, for 1, 2, 3, 4, 5 and 8 real rank processes and for each algorithm family, against
// the serial reference in support/reference.cpp (8 ranks and the wider configurations sweep
// one type per element size and three ops: support/sweep.hpp). The Efa instantiation runs the same
// bodies with every peer reached through libfabric (net and tcp;ofi_rxm pinned to loopback, and
// shm), and as emulated nodes (TRNCCL_HOSTID alternating) mixing shm inside a node with efa between
// nodes over the default provider.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <tuple>

#include "support/sweep.hpp"

namespace trnccl::testing {
namespace {

struct Param {
  std::string algo;
  int nranks;
};

// "rd", "rhd", "tree", "bruck", "binomial" (and "<name>-nodes", over 2 emulated nodes): that
// algorithm forced for the collectives it exists for (AlgorithmConfig below); the other
// collectives' tests are skipped there. "direct" / "ring": TRNCCL_ALGO ("direct" with CMA off;
// "cma": direct with every block above the small-message lines read by CMA). "trn2": the
// trn2.48xlarge preset with the ring family. "torus16", "torus2x16", "hier2x16", "hier2x3",
// "hier322": the topology-shaped algorithms (see below). "efa-net" / "efa-tcp" / "efa-shm": every
// peer over libfabric with that provider (net, tcp;ofi_rxm, shm). "nodes": ranks alternate between
// two emulated nodes, efa between them over the provider trnccl picks by default.
// TRNCCL_STREAM_COPY_BYTES is low under "direct" and "ring" (see below).
struct AlgorithmConfig {
  std::vector<const char*> kinds;  // TRNCCL_ALGO collective names
  std::vector<const char*> tests;  // the tests that exercise them
};
const AlgorithmConfig* algorithmConfig(const std::string& config) {
  static const std::vector<const char*> allReduce = {"AllReduce",
                                                     "AllReduceAroundTheRecursiveDoublingLimit"};
  static const std::map<std::string, AlgorithmConfig> configs = {
      {"rd", {{"allreduce"}, allReduce}},
      {"rhd", {{"allreduce"}, allReduce}},
      {"tree", {{"allreduce"}, allReduce}},
      {"bruck", {{"allgather", "alltoall"}, {"AllGather", "AllToAll"}}},
      {"binomial", {{"broadcast", "reduce"}, {"Broadcast", "Reduce"}}},
  };
  auto it = configs.find(config.substr(0, config.find('-')));
  return it == configs.end() ? nullptr : &it->second;
}

void configureRank(const std::string& config, int rank) {
  setenv("FI_TCP_IFACE", "lo", 1);  // loopback only, for tcp and for net
  setenv("FI_NET_IFACE", "lo", 1);
  if (config == "cma") {
    // Direct schedules reading every block above the small-message lines out of the peers'
    // buffers (CMA), however small or large (init's timing of the kernel's copy could
    // otherwise leave large blocks, or with more ranks than cores all, to the windows).
    setenv("TRNCCL_ALGO", "direct", 1);
    setenv("TRNCCL_CMA_MIN_BYTES", "1", 1);
    setenv("TRNCCL_CMA_MAX_BYTES", "1G", 1);
  } else if (config == "direct" || config == "ring") {
    setenv("TRNCCL_ALGO", config.c_str(), 1);
    // "direct" keeps the staging windows at every size ("cma" covers the single copy).
    if (config == "direct") setenv("TRNCCL_CMA", "0", 1);
    // Most sweep sizes then take the streaming-store copies into user buffers, and the guard
    // bytes check their unaligned heads and tails; "nodes" keeps the default (cached) copies.
    setenv("TRNCCL_STREAM_COPY_BYTES", "4K", 1);
  } else if (config == "efa-net" || config == "efa-tcp" || config == "efa-shm") {
    setenv("TRNCCL_TRANSPORT", "efa", 1);
    const char* provider = config == "efa-net"   ? "net"
                           : config == "efa-tcp" ? "tcp;ofi_rxm"
                                                 : "shm";
    setenv("TRNCCL_FI_PROVIDER", provider, 1);
    // Over tcp, register user buffers per message, as on providers that pin pages (EFA).
    if (config == "efa-tcp") setenv("TRNCCL_EFA_MR_CACHE", "0", 1);
  } else if (config == "torus16" || config == "torus2x16" || config == "hier2x16") {
    // 16 ranks on an emulated trn2 node, or 2 nodes x 16 of an UltraServer (efa between the
    // nodes): every torus / hierarchical schedule, on the quick sweep (32 processes on 2 cores).
    const bool ultra = config != "torus16";
    setenv("TRNCCL_TOPO_PRESET", ultra ? "trn2u.48xlarge" : "trn2.48xlarge", 1);
    setenv("TRNCCL_ALGO", config == "hier2x16" ? "hierarchical" : "torus", 1);
    if (ultra) setenv("TRNCCL_HOSTID", rank < 16 ? "ultra-a" : "ultra-b", 1);
    setenv("TRNCCL_TEST_QUICK", "1", 1);
    setenv("TRNCCL_TEST_WIDE", "1", 1);
  } else if (config == "hier2x3" || config == "hier322") {
    // Hierarchical without devices: 2 nodes x 3 ranks, and uneven nodes of 3, 2 and 2 ranks
    // (the ranks past the smallest node's size fold into its owners).
    const int node = config == "hier2x3" ? rank / 3 : rank < 3 ? 0 : rank < 5 ? 1 : 2;
    setenv("TRNCCL_HOSTID", ("hier-node-" + std::to_string(node)).c_str(), 1);
    setenv("TRNCCL_ALGO", "hierarchical", 1);
    // All-to-all(v) blocks past this go straight instead of through the ports: the default
    // (16 KiB) on 2 x 3, 1 KiB on 3+2+2, so that more calls mix both paths.
    if (config == "hier322") setenv("TRNCCL_AGGREGATE_MAX_BYTES", "1K", 1);
    setenv("TRNCCL_TEST_QUICK", "1", 1);  // the 1 Mi-element counts run in "nodes" (2x2, 2+1)
    unsetenv("TRNCCL_FI_PROVIDER");
  } else if (config == "trn2") {
    // An emulated trn2 node: ring-family schedules whose messages go over NeuronLink between
    // linked chips and over shm between the others.
    setenv("TRNCCL_TOPO_PRESET", "trn2.48xlarge", 1);
    setenv("TRNCCL_ALGO", "ring", 1);
  } else if (algorithmConfig(config)) {
    // One latency-form algorithm forced for the collectives that have it (named per
    // collective, so a refusal fails the test); half the ranks on a second emulated node when
    // the config ends in "-nodes" (efa between them).
    const std::string name = config.substr(0, config.find('-'));
    std::string forced;
    for (const char* kind : algorithmConfig(config)->kinds) {
      if (!forced.empty()) forced += ";";
      forced += std::string(kind) + ":" + name;
    }
    setenv("TRNCCL_ALGO", forced.c_str(), 1);
    if (config.find("-nodes") != std::string::npos)
      setenv("TRNCCL_HOSTID", rank % 2 ? "node-b" : "node-a", 1);
    unsetenv("TRNCCL_FI_PROVIDER");
  } else if (config == "nodes") {
    setenv("TRNCCL_HOSTID", rank % 2 ? "node-b" : "node-a", 1);
    unsetenv("TRNCCL_FI_PROVIDER");
  }
}

class Collectives : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  std::string algo() const { return std::get<0>(GetParam()); }
  int nranks() const { return std::get<1>(GetParam()); }
  // Runs body on every rank with TRNCCL_ALGO set and a communicator ready.
  void run(const std::function<void(Failures&, trncclComm_t, int rank, int n)>& body) {
    std::string config = algo();
    // The sanitizer pass (quick mode) keeps one rank count per libfabric configuration.
    if (quickMode() && config.rfind("efa", 0) == 0 && nranks() != 3)
      GTEST_SKIP() << "quick mode: efa configurations run with 3 ranks only";
    if (quickMode() && nranks() > 16) GTEST_SKIP() << "quick mode (sanitizers): at most 16 ranks";
    // The 32-rank UltraServer slices exist for the torus and hierarchical schedules; the other
    // collectives' schedules are the ring family's, covered by every other configuration.
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    const bool shaped = test.rfind("AllReduce", 0) == 0 || test.rfind("AllGather", 0) == 0 ||
                        test.rfind("ReduceScatter", 0) == 0 || test.rfind("Broadcast", 0) == 0;
    if (nranks() > 16 && !shaped)
      GTEST_SKIP() << "32 ranks run only the collectives with topology-shaped schedules";
    if (config == "cma" && test.rfind("AllGather", 0) != 0 && test.rfind("AllToAll", 0) != 0 &&
        test.rfind("Broadcast", 0) != 0)
      GTEST_SKIP() << "cma: only all-gather, all-to-all(v) and broadcast have single-copy forms";
    if (const AlgorithmConfig* forced = algorithmConfig(config)) {
      bool exercised = false;
      for (const char* name : forced->tests) exercised |= test.substr(0, test.find('/')) == name;
      if (!exercised) GTEST_SKIP() << config << " is not forced for " << test;
    }
    if (quickMode() && config == "nodes" && nranks() != 4)
      GTEST_SKIP() << "quick mode: emulated nodes run with 4 ranks only";
    if (quickMode() && algorithmConfig(config) && nranks() != 3 && nranks() != 4)
      GTEST_SKIP() << "quick mode: forced algorithms run with 3 and 4 ranks only";
    // Forced algorithms at 5-8 ranks sweep every type and op, without the 1 Mi-element count
    // (2-4 ranks have it), and so do the single-provider efa configurations at 2 and 4 ranks
    // (3 ranks have it): the suite's time budget on 2 cores.
    const bool trimmed = (algorithmConfig(config) && nranks() >= 5) ||
                         (config.rfind("efa-", 0) == 0 && nranks() != 3);
    // The single-provider efa configurations move bytes as the shm ones do once a message is
    // on the wire, and 8 ranks run the schedules that 1-5 ranks sweep in full: both sweep the
    // wide set (support/sweep.hpp) of types and ops.
    const bool wide = config.rfind("efa-", 0) == 0 || nranks() == 8;
    auto outcomes = withComm(
        nranks(),
        [&](int rank) {
          configureRank(config, rank);
          if (trimmed) setenv("TRNCCL_TEST_QUICK", "1", 1);
          if (wide) setenv("TRNCCL_TEST_WIDE", "1", 1);
        },
        body);
    EXPECT_ALL_RANKS_OK(outcomes);
  }
};

std::string label(const char* coll, trncclDataType_t t, trncclRedOp_t op, size_t count,
                  bool inPlace, int rank) {
  return std::string(coll) + " " + typeName(t) + " " + opName(op) +
         " count=" + std::to_string(count) + (inPlace ? " in-place" : " out-of-place") + " rank " +
         std::to_string(rank);
}

bool ok(Failures& f, trncclResult_t rc, const std::string& what) {
  if (rc == trncclSuccess) return true;
  f.add("%s returned %s: %s", what.c_str(), trncclGetErrorString(rc), trncclGetLastError(nullptr));
  return false;
}

void inputsOf(std::vector<Bytes>& inputs, trncclDataType_t t, trncclRedOp_t op, int n, size_t count,
              uint64_t salt) {
  inputs.resize(n);
  for (int q = 0; q < n; ++q) makeInput(inputs[q], t, op, q, count, salt);
}

std::vector<const Bytes*> pointers(const std::vector<Bytes>& inputs) {
  std::vector<const Bytes*> p;
  for (const auto& b : inputs) p.push_back(&b);
  return p;
}

// One all-reduce of `count` elements checked against the serial reference, out of place and in
// place; returns false when a call failed (the caller stops). Buffers are kept between calls.
struct AllReduceCheck {
  std::vector<Bytes> inputs;
  Bytes want;
  Guarded out;

  bool run(Failures& f, trncclComm_t comm, int rank, int n, trncclDataType_t t, trncclRedOp_t op,
           size_t count) {
    inputsOf(inputs, t, op, n, count, saltOf(t, op, count));
    reduceReference(want, t, op, pointers(inputs), 0, count);
    size_t bytes = count * typeSize(t);
    for (bool inPlace : {false, true}) {
      std::string what = label("AllReduce", t, op, count, inPlace, rank);
      out.reset(bytes);
      if (inPlace) copyBytes(out.ptr(), inputs[rank].data(), bytes);
      const void* send = inPlace ? out.ptr() : inputs[rank].data();
      if (!ok(f, trncclAllReduce(send, out.ptr(), count, t, op, comm), what)) return false;
      expectSame(f, what, out.ptr(), want.data(), count, t);
      if (!out.guardIntact()) f.add("%s wrote past the end", what.c_str());
    }
    return true;
  }
};

TEST_P(Collectives, AllReduce) {
  run([](Failures& f, trncclComm_t comm, int rank, int n) {
    AllReduceCheck check;
    for (auto t : reducibleTypes())
      for (auto op : allOps())
        for (size_t count : sweepCounts(t, op))
          if (!check.run(f, comm, rank, n, t, op, count)) return;
  });
}

// The planner switches from recursive doubling to the ring above 256 KiB off a single node:
// both sides of the limit for every configuration's algorithm, whatever the sweep's counts
// (the sanitizer pass keeps only small ones).
TEST_P(Collectives, AllReduceAroundTheRecursiveDoublingLimit) {
  run([](Failures& f, trncclComm_t comm, int rank, int n) {
    AllReduceCheck check;
    const std::pair<trncclDataType_t, trncclRedOp_t> cases[] = {
        {trncclFloat32, trncclSum}, {trncclFloat32, trncclAvg}, {trncclBfloat16, trncclMax}};
    for (auto [t, op] : cases)
      for (size_t bytes : {size_t{256} << 10, (size_t{256} << 10) + 64})
        if (!check.run(f, comm, rank, n, t, op, bytes / typeSize(t))) return;
  });
}

TEST_P(Collectives, Reduce) {
  run([](Failures& f, trncclComm_t comm, int rank, int n) {
    std::vector<Bytes> inputs;
    Bytes want;
    Guarded out;
    for (auto t : reducibleTypes())
      for (auto op : allOps())
        for (size_t count : sweepCounts(t, op)) {
          int root = static_cast<int>(count % n);
          inputsOf(inputs, t, op, n, count, saltOf(t, op, count) + 1);
          if (rank == root) reduceReference(want, t, op, pointers(inputs), 0, count);
          size_t bytes = count * typeSize(t);
          for (bool inPlace : {false, true}) {
            std::string what = label("Reduce", t, op, count, inPlace, rank);
            out.reset(bytes);
            copyBytes(out.ptr(), inputs[rank].data(), bytes);
            const void* send = inPlace ? out.ptr() : inputs[rank].data();
            if (!ok(f, trncclReduce(send, out.ptr(), count, t, op, root, comm), what)) return;
            if (rank == root)
              expectSame(f, what, out.ptr(), want.data(), count, t);
            else if (!inPlace)  // non-roots' receive buffers are not touched
              expectSame(f, what + " (non-root buffer)", out.ptr(), inputs[rank].data(), count, t);
            if (!out.guardIntact()) f.add("%s wrote past the end", what.c_str());
          }
        }
  });
}

// Reduce-scatter's, all-gather's and all-to-all's counts are per block and every rank moves n
// blocks: at 5 ranks and more the large count is 1 Mi elements over all blocks rather than per
// block. Per block, an 8-rank int64 all-to-all touched 192 MiB per rank and the test's time went
// to faulting those pages in, not to the collective; 2-4 ranks keep the per-block 1 Mi count.
std::vector<size_t> perBlock(int n, std::vector<size_t> counts) {
  if (n >= 5 && counts.back() > (1u << 20)) counts.back() = (1u << 20) / n + 3;
  return counts;
}

// One reduce-scatter of `count` elements per rank checked against the serial reference, out of
// place and in place (recvbuff this rank's block of sendbuff); returns false when a call failed.
struct ReduceScatterCheck {
  Bytes mine, want;
  std::vector<Bytes> blocks;  // block `rank` of every rank's input
  Guarded buf, out;

  bool run(Failures& f, trncclComm_t comm, int rank, int n, trncclDataType_t t, trncclRedOp_t op,
           size_t count) {
    blocks.resize(n);
    size_t esize = typeSize(t), bytes = count * esize;
    uint64_t salt = saltOf(t, op, count) + 2;
    makeInput(mine, t, op, rank, count * n, salt);
    for (int q = 0; q < n; ++q) makeInputRange(blocks[q], t, op, q, rank * count, count, salt);
    reduceReference(want, t, op, pointers(blocks), 0, count);
    for (bool inPlace : {false, true}) {
      std::string what = label("ReduceScatter", t, op, count, inPlace, rank);
      if (inPlace) {
        buf.reset(bytes * n);
        copyBytes(buf.ptr(), mine.data(), bytes * n);
        char* recv = buf.ptr() + rank * bytes;
        if (!ok(f, trncclReduceScatter(buf.ptr(), recv, count, t, op, comm), what)) return false;
        expectSame(f, what, recv, want.data(), count, t);
        if (!buf.guardIntact()) f.add("%s wrote past the end", what.c_str());
      } else {
        out.reset(bytes);
        if (!ok(f, trncclReduceScatter(mine.data(), out.ptr(), count, t, op, comm), what))
          return false;
        expectSame(f, what, out.ptr(), want.data(), count, t);
        if (!out.guardIntact()) f.add("%s wrote past the end", what.c_str());
      }
    }
    return true;
  }
};

TEST_P(Collectives, ReduceScatter) {
  run([](Failures& f, trncclComm_t comm, int rank, int n) {
    ReduceScatterCheck check;
    for (auto t : reducibleTypes())
      for (auto op : allOps())
        for (size_t count : perBlock(n, sweepCounts(t, op)))
          if (!check.run(f, comm, rank, n, t, op, count)) return;
  });
}

// One all-gather of `count` elements per rank checked against the serial reference, out of
// place and in place; `inputOp` and `salt` pick the inputs. Returns false when a call failed.
struct AllGatherCheck {
  std::vector<Bytes> inputs;
  Bytes want;
  Guarded out;

  bool run(Failures& f, trncclComm_t comm, int rank, int n, trncclDataType_t t,
           trncclRedOp_t inputOp, uint64_t salt, size_t count) {
    size_t bytes = count * typeSize(t);
    inputsOf(inputs, t, inputOp, n, count, salt);
    want.clear();
    for (const auto& in : inputs) want.insert(want.end(), in.begin(), in.end());
    for (bool inPlace : {false, true}) {
      std::string what = label("AllGather", t, inputOp, count, inPlace, rank);
      out.reset(bytes * n);
      if (inPlace) copyBytes(out.ptr() + rank * bytes, inputs[rank].data(), bytes);
      const void* send = inPlace ? out.ptr() + rank * bytes : inputs[rank].data();
      if (!ok(f, trncclAllGather(send, out.ptr(), count, t, comm), what)) return false;
      expectSame(f, what, out.ptr(), want.data(), count * n, t);
      if (!out.guardIntact()) f.add("%s wrote past the end", what.c_str());
    }
    return true;
  }
};

TEST_P(Collectives, AllGather) {
  run([](Failures& f, trncclComm_t comm, int rank, int n) {
    AllGatherCheck check;
    for (auto t : allTypes())
      for (size_t count : perBlock(n, sweepCounts(t)))
        if (!check.run(f, comm, rank, n, t, trncclMax, saltOf(t, 7, count), count)) return;
  });
}

// The grid schedules (hierarchical, torus) send blocks of 64 KiB and more where they lie in
// rank order instead of staging them in grid order (collectives/levels.hpp,
// kGridUnstagedMinBlockBytes); the sweep's counts stay below that in these configurations
// (quick mode), so blocks just past it are checked here: on 2 nodes x 3 ranks each node's
// part is two runs (ranks p and 3 + p), on the 4x4 torus the x rings' parts are columns.
TEST_P(Collectives, GridBlocksPastTheStagingLimit) {
  if (algo() != "hier2x3" && algo() != "torus16")
    GTEST_SKIP() << "only the grid schedules stage blocks";
  run([](Failures& f, trncclComm_t comm, int rank, int n) {
    AllGatherCheck allGather;
    ReduceScatterCheck reduceScatter;
    const size_t limit = size_t{64} << 10;
    for (auto [t, op] : {std::pair{trncclFloat32, trncclSum}, std::pair{trncclBfloat16, trncclAvg},
                         std::pair{trncclInt8, trncclMax}}) {
      const size_t esize = typeSize(t);
      for (size_t count : {limit / esize - 1, limit / esize + 3})
        if (!allGather.run(f, comm, rank, n, t, op, saltOf(t, op, count), count) ||
            !reduceScatter.run(f, comm, rank, n, t, op, count))
          return;
    }
  });
}

TEST_P(Collectives, Broadcast) {
  run([](Failures& f, trncclComm_t comm, int rank, int n) {
    Bytes data;
    Guarded out;
    for (auto t : allTypes())
      for (size_t count : sweepCounts(t)) {
        int root = static_cast<int>((count + t) % n);
        size_t bytes = count * typeSize(t);
        makeInput(data, t, trncclMax, root, count, saltOf(t, 8, count));
        for (bool inPlace : {false, true}) {
          std::string what = label("Broadcast", t, trncclSum, count, inPlace, rank);
          out.reset(bytes);
          if (inPlace && rank == root) copyBytes(out.ptr(), data.data(), bytes);
          const void* send = rank != root ? nullptr : inPlace ? out.ptr() : data.data();
          if (!ok(f, trncclBroadcast(send, out.ptr(), count, t, root, comm), what)) return;
          expectSame(f, what, out.ptr(), data.data(), count, t);
          if (!out.guardIntact()) f.add("%s wrote past the end", what.c_str());
        }
      }
  });
}

TEST_P(Collectives, AllToAll) {
  run([](Failures& f, trncclComm_t comm, int rank, int n) {
    Bytes mine, want, block;
    Guarded out;
    for (auto t : allTypes())
      for (size_t count : perBlock(n, sweepCounts(t))) {
        size_t bytes = count * typeSize(t);
        uint64_t salt = saltOf(t, 9, count);
        makeInput(mine, t, trncclMax, rank, count * n, salt);
        want.clear();
        for (int q = 0; q < n; ++q) {
          makeInputRange(block, t, trncclMax, q, rank * count, count, salt);
          want.insert(want.end(), block.begin(), block.end());
        }
        for (bool inPlace : {false, true}) {
          std::string what = label("AllToAll", t, trncclSum, count, inPlace, rank);
          out.reset(bytes * n);
          if (inPlace) copyBytes(out.ptr(), mine.data(), bytes * n);
          const void* send = inPlace ? out.ptr() : mine.data();
          if (!ok(f, trncclAllToAll(send, out.ptr(), count, t, comm), what)) return;
          expectSame(f, what, out.ptr(), want.data(), count * n, t);
          if (!out.guardIntact()) f.add("%s wrote past the end", what.c_str());
        }
      }
  });
}

// Block sizes vary by (source, destination), including empty blocks, with gaps between blocks.
size_t blockCount(int src, int dst, size_t scale) {
  return ((src * 3 + dst * 5) % 4) * scale + (src == dst ? 1 : 0);
}

TEST_P(Collectives, AllToAllv) {
  run([](Failures& f, trncclComm_t comm, int rank, int n) {
    for (auto t : allTypes())
      for (size_t scale : {0, 1, 7, 1023, 100003}) {
        if (scale == 100003 && (quickMode() || !representsItsSize(t))) continue;
        size_t esize = typeSize(t);
        auto layout = [&](int src, std::vector<size_t>& counts, std::vector<size_t>& displs,
                          bool sending) {
          size_t offset = 0;
          for (int q = 0; q < n; ++q) {
            counts.push_back(sending ? blockCount(src, q, scale) : blockCount(q, src, scale));
            displs.push_back(offset);
            offset += counts.back() + 3;  // a gap the call must not touch
          }
          return offset;
        };
        std::vector<size_t> sc, sd, rc, rd;
        size_t sendExtent = layout(rank, sc, sd, true);
        size_t recvExtent = layout(rank, rc, rd, false);
        std::vector<Bytes> inputs(n);
        std::vector<std::vector<size_t>> peerDispls(n);
        for (int q = 0; q < n; ++q) {
          std::vector<size_t> c;
          size_t extent = layout(q, c, peerDispls[q], true);
          makeInput(inputs[q], t, trncclMax, q, extent, saltOf(t, 10, scale));
        }
        Guarded out(recvExtent * esize, 0x11);
        Bytes want(out.data.begin(), out.data.begin() + recvExtent * esize);
        for (int q = 0; q < n; ++q)
          copyBytes(want.data() + rd[q] * esize, inputs[q].data() + peerDispls[q][rank] * esize,
                    rc[q] * esize);
        std::string what = std::string("AllToAllv ") + typeName(t) +
                           " scale=" + std::to_string(scale) + " rank " + std::to_string(rank);
        (void)sendExtent;
        if (!ok(f,
                trncclAllToAllv(inputs[rank].data(), sc.data(), sd.data(), out.ptr(), rc.data(),
                                rd.data(), t, comm),
                what))
          return;
        expectSame(f, what, out.ptr(), want.data(), recvExtent, t);
        if (!out.guardIntact()) f.add("%s wrote past the end", what.c_str());
      }
  });
}

TEST_P(Collectives, SendRecvRingAndBarrier) {
  run([](Failures& f, trncclComm_t comm, int rank, int n) {
    for (auto t : allTypes())
      for (size_t count : sweepCounts(t)) {
        int next = (rank + 1) % n, prev = (rank + n - 1) % n;
        Bytes mine, fromPrev;
        makeInput(mine, t, trncclMax, rank, count, saltOf(t, 11, count));
        makeInput(fromPrev, t, trncclMax, prev, count, saltOf(t, 11, count));
        Guarded out(count * typeSize(t));
        std::string what = label("Send/Recv ring", t, trncclSum, count, false, rank);
        trncclGroupStart();
        trncclSend(mine.data(), count, t, next, comm);
        trncclRecv(out.ptr(), count, t, prev, comm);
        if (!ok(f, trncclGroupEnd(), what)) return;
        expectSame(f, what, out.ptr(), fromPrev.data(), count, t);
        if (!out.guardIntact()) f.add("%s wrote past the end", what.c_str());
      }
    for (int i = 0; i < 5; ++i)
      if (!ok(f, trncclBarrier(comm), "Barrier")) return;
  });
}

// The planner's pairwise all-to-all on one node (blocks of 4 MiB, Planner::agreesOnInPlace)
// takes the windows when any rank works in place, and stays pairwise when none does: every
// rank reads every descriptor first, so ranks that differ still run matching schedules. The
// traffic counters tell the forms apart: pairwise sends count, window copies do not. Out of
// place first, so that a planner that stopped choosing the ring here fails the test.
TEST(AllToAllInPlace, PairwiseTakesTheWindowsWhenAnyRankWorksInPlace) {
  constexpr size_t kCount = size_t{1} << 20;  // floats: 4 MiB blocks
  auto outcomes = withComm(
      3,
      [](int) {
        unsetenv("TRNCCL_ALGO");
        setenv("TRNCCL_CMA_MAX_BYTES", "1M", 1);  // no single-copy band at this size
      },
      [&](Failures& f, trncclComm_t comm, int rank, int n) {
        std::vector<float> send(kCount * n), recv(kCount * n);
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < kCount; ++i)
            send[q * kCount + i] = static_cast<float>(rank * 1000003 + q * 1009 + i);
        auto sentToPeers = [&] {
          std::vector<trncclPeerTraffic_t> traffic(n);
          int count = 0;
          if (trncclCommGetPeerTraffic(comm, traffic.data(), n, &count) != trncclSuccess)
            f.add("traffic: %s", trncclGetLastError(comm));
          unsigned long long bytes = 0;
          for (int q = 0; q < count; ++q)
            if (q != rank) bytes += traffic[q].sentBytes;
          return bytes;
        };
        struct Case {
          const char* name;
          bool inPlace;
          bool pairwise;
        };
        const Case cases[] = {{"every rank out of place", false, true},
                              {"rank 1 in place", rank == 1, false},
                              {"every rank in place", true, false}};
        for (const Case& c : cases) {
          recv.assign(recv.size(), -1.0f);
          if (c.inPlace) recv = send;
          const unsigned long long before = sentToPeers();
          if (trncclAllToAll(c.inPlace ? recv.data() : send.data(), recv.data(), kCount,
                             trncclFloat32, comm) != trncclSuccess) {
            f.add("%s: all-to-all failed: %s", c.name, trncclGetLastError(comm));
            return;
          }
          for (int q = 0; q < n; ++q)
            for (size_t i = 0; i < kCount; ++i)
              if (recv[q * kCount + i] != static_cast<float>(q * 1000003 + rank * 1009 + i)) {
                f.add("%s: block %d element %zu is %g", c.name, q, i, recv[q * kCount + i]);
                return;
              }
          const unsigned long long sent = sentToPeers() - before;
          const unsigned long long pairwise = (n - 1) * kCount * sizeof(float);
          if (sent != (c.pairwise ? pairwise : 0))
            f.add("%s: %llu bytes sent to peers, expected %llu (%s)", c.name, sent,
                  c.pairwise ? pairwise : 0ull, c.pairwise ? "pairwise" : "the windows");
        }
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

std::string paramName(const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
  return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
}

// paramName for configurations whose names have dashes (not allowed in test names).
std::string identifierName(const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
  std::string name = paramName(info);
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(Sweep, Collectives,
                         ::testing::Combine(::testing::Values("direct", "ring"),
                                            ::testing::Values(1, 2, 3, 4, 5, 8)),
                         paramName);
INSTANTIATE_TEST_SUITE_P(Cma, Collectives,
                         ::testing::Combine(::testing::Values("cma"), ::testing::Values(2, 3, 5)),
                         paramName);
INSTANTIATE_TEST_SUITE_P(Algos, Collectives,
                         ::testing::Combine(::testing::Values("rd", "rhd", "tree", "bruck",
                                                              "binomial"),
                                            ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8)),
                         paramName);
INSTANTIATE_TEST_SUITE_P(AlgosNodes, Collectives,
                         ::testing::Combine(::testing::Values("rd-nodes", "rhd-nodes", "tree-nodes",
                                                              "bruck-nodes", "binomial-nodes"),
                                            ::testing::Values(3, 4)),
                         identifierName);
INSTANTIATE_TEST_SUITE_P(Topo, Collectives,
                         ::testing::Combine(::testing::Values("trn2"), ::testing::Values(4, 5)),
                         paramName);
INSTANTIATE_TEST_SUITE_P(TopoShaped, Collectives,
                         ::testing::Values(std::make_tuple(std::string("torus16"), 16),
                                           std::make_tuple(std::string("torus2x16"), 32),
                                           std::make_tuple(std::string("hier2x16"), 32),
                                           std::make_tuple(std::string("hier2x3"), 6),
                                           std::make_tuple(std::string("hier322"), 7)),
                         paramName);
INSTANTIATE_TEST_SUITE_P(Efa, Collectives,
                         ::testing::Combine(::testing::Values("efa-net", "efa-tcp", "efa-shm",
                                                              "nodes"),
                                            ::testing::Values(2, 3, 4)),
                         identifierName);

}  // namespace
}  // namespace trnccl::testing
