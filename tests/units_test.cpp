// Unit tests of the pieces under the communicator: env registry, type conversions, reduction
// kernels (every compiled ISA variant against the independent reference), the planner's
// override grammar, unique id text form, node grouping and the shared-memory segment's attach.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>

#include "bootstrap/bootstrap.hpp"
#include "collectives/planner.hpp"
#include "collectives/registry.hpp"
#include "core/copy.hpp"
#include "core/dtype.hpp"
#include "core/env.hpp"
#include "core/reduce.hpp"
#include "core/reduce_isa.hpp"
#include "core/text_file.hpp"
#include "support/reference.hpp"
#include "support/sweep.hpp"
#include "topology/host.hpp"
#include "transports/shm/segment.hpp"

namespace trnccl {
namespace {

using testing::Bytes;

TEST(Env, FileNamePatternsTakeHostAndPidOnce) {
  EXPECT_EQ(expandPathPattern("/tmp/log.%h.%p", "node7", 42), "/tmp/log.node7.42");
  EXPECT_EQ(expandPathPattern("%h%h-%", "a", 1), "aa-%");
  // A host name that itself holds %h is not expanded again.
  EXPECT_EQ(expandPathPattern("x.%h", "odd%hname", 1), "x.odd%hname");
  EXPECT_EQ(expandPathPattern("plain", "h", 1), "plain");
}

TEST(Env, ParsesBytesSecondsAndRejectsJunk) {
  setenv("TRNCCL_SHM_CHUNK_BYTES", "512K", 1);
  EXPECT_EQ(env::getInt(env::kShmChunkBytes).value(), 512 * 1024);
  setenv("TRNCCL_SHM_CHUNK_BYTES", "2MiB", 1);
  EXPECT_EQ(env::getInt(env::kShmChunkBytes).value(), 2 * 1024 * 1024);
  setenv("TRNCCL_SHM_CHUNK_BYTES", "lots", 1);
  auto bad = env::getInt(env::kShmChunkBytes);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("TRNCCL_SHM_CHUNK_BYTES='lots'"), std::string::npos);
  unsetenv("TRNCCL_SHM_CHUNK_BYTES");
  EXPECT_EQ(env::getInt(env::kShmChunkBytes).value(), 256 * 1024);  // the default
  setenv("TRNCCL_TIMEOUT", "2.5", 1);
  EXPECT_DOUBLE_EQ(env::getSeconds(env::kTimeout).value(), 2.5);
  setenv("TRNCCL_TIMEOUT", "-1", 1);
  EXPECT_FALSE(env::getSeconds(env::kTimeout).isOk());
  unsetenv("TRNCCL_TIMEOUT");
  // Every variable is documented and listed once.
  std::string table = env::describeAll();
  for (const env::Var* var : env::all()) {
    EXPECT_NE(table.find(var->name), std::string::npos);
    EXPECT_GT(std::strlen(var->doc), 10u) << var->name;
  }
}

// The registry's list is written by hand; a variable declared but left out of it would be
// missing from `trnccl-info --env` (TRNCCL_TOPO_XML once was). Count the declarations.
TEST(Env, EveryDeclaredVariableIsListed) {
  std::ifstream header(TRNCCL_ENV_HEADER);
  ASSERT_TRUE(header.good()) << TRNCCL_ENV_HEADER;
  std::set<std::string> declared;
  for (std::string line; std::getline(header, line);) {
    const std::string prefix = "extern const Var ";
    if (line.rfind(prefix, 0) == 0) declared.insert(line.substr(prefix.size()));
  }
  EXPECT_GE(declared.size(), 20u);
  EXPECT_EQ(declared.size(), env::all().size());
  std::set<std::string> listed;
  for (const env::Var* var : env::all()) listed.insert(var->name);
  EXPECT_EQ(listed.size(), env::all().size()) << "a variable is listed twice";
}

// Tools and tests set variables for a scope (trnccl-tune's probes, -X tuned=FILE): what was
// there before comes back, set or unset, also when one scope sets the same variable twice.
TEST(Env, ScopedOverridePutsBackWhatWasThere) {
  const env::Var& set = env::kTopoPreset;
  const env::Var& unset = env::kTopoFile;
  setenv(set.name, "before", 1);
  unsetenv(unset.name);
  {
    env::ScopedOverride scope(set, nullptr);
    scope.set(unset, "during");
    scope.set(unset, "again");
    EXPECT_EQ(env::rawValue(set), nullptr);
    EXPECT_STREQ(env::rawValue(unset), "again");
  }
  EXPECT_STREQ(env::rawValue(set), "before");
  EXPECT_EQ(env::rawValue(unset), nullptr);
  unsetenv(set.name);
}

TEST(Copy, StreamingAndCachedCopiesMatchByteForByteAtEveryAlignment) {
  std::mt19937 gen(11);
  std::vector<unsigned char> src(70000 + 64), cached(src.size()), streamed(src.size());
  for (auto& b : src) b = static_cast<unsigned char>(gen());
  // Sizes around the streaming cut-over and the vector widths; offsets that misalign both ends.
  for (size_t bytes : {0ul, 1ul, 31ul, 4095ul, 4096ul, 4097ul, 4096ul + 33, 65536ul, 70000ul})
    for (size_t dstOff : {0ul, 1ul, 17ul, 32ul, 63ul})
      for (size_t srcOff : {0ul, 5ul}) {
        if (dstOff + bytes > cached.size() || srcOff + bytes > src.size()) continue;
        std::fill(cached.begin(), cached.end(), 0xAB);
        std::fill(streamed.begin(), streamed.end(), 0xAB);
        std::memcpy(cached.data() + dstOff, src.data() + srcOff, bytes);  // the reference
        copyBytes(streamed.data() + dstOff, src.data() + srcOff, bytes, CopyKind::kStreaming);
        ASSERT_EQ(cached, streamed) << bytes << " bytes, dst+" << dstOff << ", src+" << srcOff;
      }
  EXPECT_STRNE(streamingCopyIsa(), "");
}

// Cached copies whose destination lies just past the source modulo a page take the library's
// own vector loop (core/copy.cpp: glibc's rep movsb crawls there); every such distance and
// size around the loop's 128-byte step must still copy exactly.
TEST(Copy, StreamingThresholdCountsTheNodesBytes) {
  EXPECT_EQ(streamCopyBytesPerRank(8 << 20, 1), size_t{8} << 20);
  EXPECT_EQ(streamCopyBytesPerRank(8 << 20, 4), size_t{2} << 20);
  EXPECT_EQ(streamCopyBytesPerRank(8 << 20, 3), (size_t{8} << 20) / 3);
  EXPECT_EQ(streamCopyBytesPerRank(0, 4), 0u);   // 0 = never, whatever the rank count
  EXPECT_EQ(streamCopyBytesPerRank(3, 64), 1u);  // a tiny setting never rounds down to "never"
}

TEST(Copy, CachedCopiesAtShortPageDistancesMatchByteForByte) {
  constexpr size_t kPage = 4096, kMax = 70000;
  std::mt19937 gen(13);
  std::vector<unsigned char> src(kMax), expected(kMax + 2 * kPage);
  for (auto& b : src) b = static_cast<unsigned char>(gen());
  // The destination's page offset is chosen so that (dst - src) mod 4096 is `distance`.
  constexpr size_t kArena = (2 * kMax + 4 * kPage + kPage - 1) / kPage * kPage;
  auto* arena = static_cast<unsigned char*>(std::aligned_alloc(kPage, kArena));
  ASSERT_NE(arena, nullptr);
  unsigned char* from = arena;
  for (size_t bytes : {2047ul, 2048ul, 2049ul, 2048ul + 127, 4096ul + 33, 65536ul, kMax - 5})
    for (size_t distance : {1ul, 8ul, 16ul, 31ul, 32ul, 48ul, 64ul}) {
      unsigned char* to = arena + ((kMax + 2 * kPage) / kPage * kPage) + distance;
      std::memcpy(from, src.data(), bytes);
      std::memset(to - 64, 0xAB, bytes + 128);
      copyBytes(to, from, bytes);
      std::memcpy(expected.data(), src.data(), bytes);
      ASSERT_EQ(0, std::memcmp(to, expected.data(), bytes)) << bytes << " bytes at " << distance;
      for (int edge = 1; edge <= 64; ++edge) {
        ASSERT_EQ(to[-edge], 0xAB) << "wrote before the destination: " << bytes << " bytes";
        ASSERT_EQ(to[bytes + edge - 1], 0xAB) << "wrote past the destination: " << bytes;
      }
    }
  std::free(arena);
}

TEST(Conversions, HalfRoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    uint16_t bits = static_cast<uint16_t>(h);
    float f = fp16ToFloat(bits);
    _Float16 reference;
    std::memcpy(&reference, &bits, 2);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(static_cast<float>(reference)));
      continue;
    }
    ASSERT_EQ(f, static_cast<float>(reference)) << h;
    ASSERT_EQ(floatToFp16(f), bits) << h;
  }
}

TEST(Conversions, FloatToHalfAndBf16RoundLikeIndependentReferences) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = any(gen);
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    _Float16 h = static_cast<_Float16>(f);
    uint16_t hb;
    std::memcpy(&hb, &h, 2);
    ASSERT_EQ(floatToFp16(f), hb) << f;
    // bf16 reference: nearest of the two neighbours, ties to even.
    uint32_t down = bits & 0xFFFF0000u, up = down + 0x10000u;
    float lo, hi;
    std::memcpy(&lo, &down, 4);
    std::memcpy(&hi, &up, 4);
    if (std::isinf(lo)) continue;
    // Past the largest bf16 the upper neighbour is infinity, which rounds like 2^128.
    double hiValue = std::isinf(hi) ? std::copysign(std::ldexp(1.0, 128), f) : hi;
    double dl = std::fabs(double(f) - lo), dh = std::fabs(hiValue - f);
    uint16_t want = static_cast<uint16_t>((dl < dh   ? down
                                           : dh < dl ? up
                                                     : ((down >> 16) & 1 ? up : down)) >>
                                          16);
    ASSERT_EQ(floatToBf16(f), want) << f;
  }
}

TEST(Kernels, EveryIsaEveryTypeEveryOpMatchesTheReference) {
  for (auto [isa, fn, scaleAddFn] : supportedKernels()) {
    for (auto t : testing::reducibleTypes())
      for (auto op : testing::allOps())
        for (int nsrcs : {1, 2, 3, 8})
          for (size_t count : {size_t(0), size_t(1), size_t(15), size_t(513), size_t(4099)}) {
            std::vector<Bytes> inputs(nsrcs);
            std::vector<const Bytes*> ptrs;
            std::vector<const void*> srcs;
            for (int q = 0; q < nsrcs; ++q) {
              testing::makeInput(inputs[q], t, op, q, count, count + nsrcs);
              ptrs.push_back(&inputs[q]);
              srcs.push_back(inputs[q].data());
            }
            Bytes want, got(count * testing::typeSize(t) + 1, 0x33);
            testing::reduceReference(want, t, op, ptrs, 0, count);
            fn({t, op, got.data(), srcs.data(), nsrcs, count, op == trncclAvg ? nsrcs : 0});
            ASSERT_EQ(testing::firstMismatch(got.data(), want.data(), count, t), size_t(-1))
                << isa << " " << testing::typeName(t) << " " << testing::opName(op)
                << " n=" << nsrcs << " count=" << count;
            ASSERT_EQ(got.back(), 0x33) << "wrote past the end";
          }
  }
}

// Random bit patterns (NaN, inf, denormals, both signs) and pairs whose sum is denormal, for
// the vector conversion paths; every variant must round each element exactly like the scalar
// conversion (checked separately against independent references above). A NaN result only
// has to be a NaN: which input's payload survives is the hardware's choice.
TEST(Kernels, HalfPrecisionEdgeValuesMatchScalarRoundingOnEveryIsa) {
  std::mt19937 rng(7);
  const size_t count = 4099;  // vector bodies plus a ragged tail
  for (bool bf16 : {true, false}) {
    auto toFloat = bf16 ? bf16ToFloat : fp16ToFloat;
    auto fromFloat = bf16 ? floatToBf16 : floatToFp16;
    const trncclDataType_t type = bf16 ? trncclBfloat16 : trncclFloat16;
    std::vector<uint16_t> x(count), y(count);
    for (size_t i = 0; i < count; ++i) {
      x[i] = static_cast<uint16_t>(rng());
      y[i] = static_cast<uint16_t>(rng());
      if (i % 3 == 0) {  // tiny values whose sum or difference lands among the denormals
        x[i] =
            static_cast<uint16_t>((rng() & 0x8000u) | (bf16 ? 0x0080u : 0x0400u) | (rng() & 0x3Fu));
        y[i] = static_cast<uint16_t>((rng() & 0x8000u) | (rng() & 0x7Fu));
      }
    }
    for (auto [isa, fn, scaleAddFn] : supportedKernels())
      for (auto op : {trncclSum, trncclMax, trncclProd})
        for (int alias = 0; alias < 3; ++alias) {  // out of place, dst == x, dst == y
          std::vector<uint16_t> got = alias == 2 ? y : x;
          if (alias == 0) std::fill(got.begin(), got.end(), 0x5555);
          const void* srcs[2] = {alias == 1 ? got.data() : x.data(),
                                 alias == 2 ? got.data() : y.data()};
          fn({type, op, got.data(), srcs, 2, count, 0});
          for (size_t i = 0; i < count; ++i) {
            float a = toFloat(x[i]), b = toFloat(y[i]);
            float r = op == trncclSum ? a + b : op == trncclProd ? a * b : (a < b ? b : a);
            uint16_t want = fromFloat(r);
            bool wantNan = std::isnan(toFloat(want));
            ASSERT_TRUE(wantNan ? std::isnan(toFloat(got[i])) : got[i] == want)
                << isa << (bf16 ? " bf16 " : " fp16 ") << testing::opName(op) << " alias " << alias
                << " i=" << i << " x=" << x[i] << " y=" << y[i] << " got " << got[i] << " want "
                << want;
          }
        }
  }
}

// The MoE combine's weighted sums: every variant gives the bits of an unfused multiply and add
// per element (the product rounded, then the sum), into fp32 (in place over acc too) or rounded
// once into the payload type, for random bit patterns incl. NaN, infinities and denormals.
TEST(Kernels, ScaleAddRoundsTheProductAndTheSumOnEveryIsa) {
  std::mt19937 rng(11);
  const size_t count = 1043;  // vector bodies plus a ragged tail
  auto sameBits = [](float a, float b) {
    return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0;
  };
  for (trncclDataType_t type : {trncclBfloat16, trncclFloat16, trncclFloat32}) {
    const bool half = type != trncclFloat32;
    auto toFloat = type == trncclBfloat16 ? bf16ToFloat : fp16ToFloat;
    auto fromFloat = type == trncclBfloat16 ? floatToBf16 : floatToFp16;
    std::vector<uint16_t> halves(count);
    std::vector<float> floats(count), acc(count);
    for (size_t i = 0; i < count; ++i) {
      halves[i] = static_cast<uint16_t>(rng());
      const uint32_t bits = static_cast<uint32_t>(rng());
      std::memcpy(&floats[i], &bits, sizeof bits);
      acc[i] = std::ldexp(static_cast<float>(static_cast<int>(rng() % 2001) - 1000), -8);
    }
    const void* row = half ? static_cast<const void*>(halves.data()) : floats.data();
    auto rowValue = [&](size_t i) { return half ? toFloat(halves[i]) : floats[i]; };
    for (auto [isa, fn, scaleAddFn] : supportedKernels())
      for (float weight : {0.375f, -1.7f})
        for (bool fromZero : {false, true})
          for (bool rounded : {false, true}) {
            std::vector<float> accOut = acc;  // in place over acc when not rounded
            std::vector<uint16_t> outHalves(count + 1, 0x3333);
            std::vector<float> outFloats(count + 1, 7.0f);
            void* out = !rounded ? nullptr
                        : half   ? static_cast<void*>(outHalves.data())
                                 : outFloats.data();
            scaleAddFn(
                {type, weight, row, fromZero ? nullptr : accOut.data(), out, accOut.data(), count});
            for (size_t i = 0; i < count; ++i) {
              volatile float product = weight * rowValue(i);  // rounded on its own
              const float sum = (fromZero ? 0.0f : acc[i]) + product;
              bool ok;
              if (!rounded)
                ok = sameBits(accOut[i], sum);
              else if (half)
                ok = std::isnan(toFloat(fromFloat(sum))) ? std::isnan(toFloat(outHalves[i]))
                                                         : outHalves[i] == fromFloat(sum);
              else
                ok = sameBits(outFloats[i], sum);
              ASSERT_TRUE(ok) << isa << " " << testing::typeName(type) << " w=" << weight
                              << " fromZero=" << fromZero << " rounded=" << rounded << " i=" << i;
            }
            ASSERT_EQ(outHalves[count], 0x3333) << "wrote past the end";
            ASSERT_EQ(outFloats[count], 7.0f) << "wrote past the end";
          }
  }
}

TEST(Kernels, InPlaceAccumulationIsAllowed) {
  // The direct algorithms reduce into one of their sources.
  std::vector<float> a(1000, 1.5f), b(1000, 2.0f);
  const void* srcs[2] = {a.data(), b.data()};
  reduce({trncclFloat32, trncclSum, a.data(), srcs, 2, a.size(), 0});
  EXPECT_EQ(a[999], 3.5f);
}

TEST(Planner, OverrideGrammar) {
  auto all = parseAlgoOverrides("ring").value();
  EXPECT_EQ(*all.forKind[static_cast<int>(CollKind::kAllGather)], Algorithm::kRing);
  auto mixed = parseAlgoOverrides("allreduce:ring;AllGather:direct").value();
  EXPECT_EQ(*mixed.forKind[static_cast<int>(CollKind::kAllReduce)], Algorithm::kRing);
  EXPECT_EQ(*mixed.forKind[static_cast<int>(CollKind::kAllGather)], Algorithm::kDirect);
  EXPECT_FALSE(mixed.forKind[static_cast<int>(CollKind::kBroadcast)].has_value());
  auto excluded = parseAlgoOverrides("^direct").value();
  EXPECT_TRUE(excluded.excluded[static_cast<int>(Algorithm::kDirect)]);
  auto bad = parseAlgoOverrides("allreduce:telepathy");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("unknown algorithm 'telepathy'"), std::string::npos);
  EXPECT_NE(bad.status().message().find("rhd"), std::string::npos);  // lists the known ones
  EXPECT_FALSE(parseAlgoOverrides("allscatter:ring").isOk());
  EXPECT_FALSE(parseAlgoOverrides("^ring,^direct").isOk());

  CommView local;
  local.nranks = 4;
  local.allLocal = true;
  Planner planner(local, parseAlgoOverrides("").value());
  EXPECT_EQ(planner.choose(CollKind::kAllReduce, 8).value(), Algorithm::kDirect);
  CommView spread = local;
  spread.allLocal = false;
  Planner multiNode(spread, parseAlgoOverrides("direct").value());
  EXPECT_FALSE(multiNode.choose(CollKind::kAllReduce, 8).isOk());
  // Off a node: the fewest rounds for 8 B, a bandwidth form for 64 MiB.
  Planner multiNodeDefault(spread, parseAlgoOverrides("").value());
  EXPECT_EQ(multiNodeDefault.choose(CollKind::kAllReduce, 8).value(),
            Algorithm::kRecursiveDoubling);
  const Algorithm large = multiNodeDefault.choose(CollKind::kAllReduce, 64 << 20).value();
  EXPECT_TRUE(large == Algorithm::kRing || large == Algorithm::kRhd) << algorithmName(large);
  // A collective named with an algorithm it does not have is refused, naming both.
  Planner bruckForAllReduce(spread, parseAlgoOverrides("allreduce:bruck").value());
  auto refused = bruckForAllReduce.choose(CollKind::kAllReduce, 8);
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.status().message().find("bruck"), std::string::npos);
  // The global form applies only where the algorithm exists.
  Planner bruckEverywhere(spread, parseAlgoOverrides("bruck").value());
  EXPECT_EQ(bruckEverywhere.choose(CollKind::kAllGather, 8).value(), Algorithm::kBruck);
  EXPECT_EQ(bruckEverywhere.choose(CollKind::kAllReduce, 8).value(), Algorithm::kRecursiveDoubling);
}

// Every algorithm the registry lists is reachable by its name and each alias, and has a
// schedule for at least one collective.
TEST(Planner, RegistryNamesEveryAlgorithm) {
  ASSERT_EQ(algorithms().size(), static_cast<size_t>(Algorithm::kCount));
  for (const auto& info : algorithms()) {
    EXPECT_EQ(algorithmFromName(info.name), info.algo) << info.name;
    EXPECT_STREQ(algorithmName(info.algo), info.name);
    std::string aliases = info.aliases;
    for (size_t start = 0; start < aliases.size();) {
      size_t comma = std::min(aliases.find(',', start), aliases.size());
      EXPECT_EQ(algorithmFromName(aliases.substr(start, comma - start)), info.algo) << aliases;
      start = comma + 1;
    }
    bool hasSchedule = false;
    for (int k = 0; k < static_cast<int>(CollKind::kCount); ++k)
      hasSchedule |= builderFor(static_cast<CollKind>(k), info.algo) != nullptr;
    EXPECT_TRUE(hasSchedule) << info.name;
  }
  EXPECT_FALSE(algorithmFromName("").has_value());
  EXPECT_FALSE(algorithmFromName("rin").has_value());
}

TEST(UniqueId, HexRoundTripAndValidation) {
  trncclUniqueId id;
  ASSERT_EQ(trncclGetUniqueId(&id), trncclSuccess);
  std::string hex = bootstrap::uniqueIdToHex(id);
  EXPECT_EQ(hex.size(), 2 * sizeof(id.internal));
  auto back = bootstrap::uniqueIdFromHex(hex);
  ASSERT_TRUE(back.isOk());
  EXPECT_EQ(std::memcmp(back.value().internal, id.internal, sizeof(id.internal)), 0);
  EXPECT_FALSE(bootstrap::uniqueIdFromHex("abc").isOk());
  EXPECT_FALSE(bootstrap::uniqueIdFromHex(std::string(hex.size(), 'z')).isOk());
  EXPECT_TRUE(bootstrap::parseUniqueId(id).isOk());
}

TEST(Topology, GroupsRanksByHost) {
  auto layout = topology::groupByHost({7, 9, 7, 9, 5});
  EXPECT_EQ(layout.nnodes, 3);
  EXPECT_EQ(layout.ranksOfNode[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(layout.localRank(3), 1);
  EXPECT_EQ(layout.localSize(4), 1);
  setenv("TRNCCL_HOSTID", "node-a", 1);
  auto a = topology::localHostIdentity();
  setenv("TRNCCL_HOSTID", "node-b", 1);
  auto b = topology::localHostIdentity();
  unsetenv("TRNCCL_HOSTID");
  EXPECT_NE(a.hash, b.hash);
  EXPECT_EQ(a.id, "node-a");
}

// The identity of a process in a new UTS namespace with its own host name (and, in the second
// case, a new pid namespace too), as a container on this machine would have: another node, the
// same kernel (its cores are shared), and pids comparable only within one pid namespace.
struct IdentityHashes {
  uint64_t hash, machineHash, kernelHash;
  bool skipped;
};

static IdentityHashes identityInNewNamespaces(bool newPidNamespace) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  if (child == 0) {
    IdentityHashes out{0, 0, 0, true};
    const char name[] = "trnccl-unit-other-host";
    if (unshare(CLONE_NEWUTS | (newPidNamespace ? CLONE_NEWPID : 0)) == 0 &&
        sethostname(name, sizeof(name) - 1) == 0) {
      // A new pid namespace holds the caller's next child, not the caller.
      const pid_t inner = newPidNamespace ? fork() : 0;
      if (inner == 0) {
        auto id = topology::localHostIdentity();
        out = {id.hash, id.machineHash, id.kernelHash, false};
        if (write(fds[1], &out, sizeof(out)) != sizeof(out)) _exit(1);
        _exit(0);
      }
      int status = 0;
      waitpid(inner, &status, 0);
      _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
    }
    if (write(fds[1], &out, sizeof(out)) != sizeof(out)) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  IdentityHashes got{0, 0, 0, true};
  EXPECT_EQ(read(fds[0], &got, sizeof(got)), static_cast<ssize_t>(sizeof(got)));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return got;
}

TEST(Topology, ContainersOnThisMachineShareItsCores) {
  unsetenv("TRNCCL_HOSTID");
  const auto here = topology::localHostIdentity();
  const auto sameKernel = identityInNewNamespaces(false);
  if (sameKernel.skipped) GTEST_SKIP() << "no new UTS namespace here (needs CAP_SYS_ADMIN)";
  EXPECT_NE(sameKernel.hash, here.hash) << "another host name is another node";
  EXPECT_EQ(sameKernel.kernelHash, here.kernelHash) << "the same kernel, so the same cores";
  EXPECT_EQ(sameKernel.machineHash, here.machineHash) << "the same pid namespace: pids comparable";
  const auto ownPids = identityInNewNamespaces(true);
  if (ownPids.skipped) GTEST_SKIP() << "no new pid namespace here";
  EXPECT_EQ(ownPids.kernelHash, here.kernelHash);
  EXPECT_NE(ownPids.machineHash, here.machineHash) << "its pids mean other processes here";
}

// Local rank 0 waits for the others to map the segment and checks meanwhile that they live. A
// peer can attach, finish its whole job and exit between rank 0's read of the attach count and
// its liveness check (CI, ThreadSanitizer, 3 ranks on 2 cores): that is a successful init, not
// "exited before mapping the segment". The liveness callback here plays that peer: it attaches
// as local rank 1, unmaps and then reports rank 1 gone.
TEST(Segment, PeerThatAttachedAndExitedDuringTheWaitIsNoInitFailure) {
  shm::SegmentParams params;
  params.localSize = 2;
  params.ringSlots = 2;
  params.ringSlotBytes = 4096;
  params.windowBytes = 4096;
  const std::string dir = "/dev/shm";
  const std::string name = "trnccl-unit-segment-" + std::to_string(getpid());
  auto ok = []() { return Status::ok(); };
  int livenessChecks = 0;
  auto peerAttachesThenExits = [&]() -> Status {
    if (++livenessChecks == 1) {
      shm::Segment peer;
      Status attached = peer.attach(dir, name, 1, params, Deadline::after(10), ok);
      EXPECT_TRUE(attached.isOk()) << attached.message();
    }
    return makeError(Code::kRemoteError, "rank 1 exited");
  };
  shm::Segment creator;
  Status status = creator.attach(dir, name, 0, params, Deadline::after(10), peerAttachesThenExits);
  EXPECT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(livenessChecks, 1);
  EXPECT_NE(access((dir + "/" + name).c_str(), F_OK), 0) << "the segment's name outlived init";

  // A peer that really never attaches still fails the init, with the liveness check's words,
  // and the name is removed.
  shm::Segment alone;
  auto neverAttaches = []() { return makeError(Code::kRemoteError, "rank 1 exited"); };
  status = alone.attach(dir, name, 0, params, Deadline::after(10), neverAttaches);
  EXPECT_EQ(status.code(), Code::kRemoteError);
  EXPECT_EQ(status.message(), "rank 1 exited");
  EXPECT_NE(access((dir + "/" + name).c_str(), F_OK), 0) << "a failed init left the segment";
}

}  // namespace
}  // namespace trnccl
