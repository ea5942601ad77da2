// The parameter space the collective tests sweep, and helpers shared by the rank bodies.
#pragma once

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "support/multirank.hpp"
#include "support/reference.hpp"
#include "trnccl.h"

namespace trnccl::testing {

// TRNCCL_TEST_WIDE=1 (set by the wide configurations: 8 ranks, the single-provider efa ones
// and the 16- and 32-rank topology ones, for their rank processes): one type per element size
// and both half floats, and three ops, instead of every one. How a message is cut depends on
// the element size and the half floats have their own kernels; every type x op kernel runs in
// the full sweep of the configurations with fewer ranks over the same schedules.
// The harness links only the public API; trncclGetEnv reads the library's registry
// (core/env.cpp), which documents both variables.
inline bool testFlag(const char* name) {
  const char* value = nullptr;
  return trncclGetEnv(name, &value, nullptr) == trncclSuccess && value && *value == '1';
}
inline bool wideMode() {
  return testFlag("TRNCCL_TEST_WIDE");
}
inline std::vector<trncclDataType_t> reducibleTypes() {
  if (wideMode()) return {trncclInt8, trncclFloat16, trncclBfloat16, trncclFloat32, trncclInt64};
  return {trncclInt8,   trncclUint8,   trncclInt32,   trncclUint32,  trncclInt64,
          trncclUint64, trncclFloat16, trncclFloat32, trncclFloat64, trncclBfloat16};
}
inline std::vector<trncclDataType_t> allTypes() {
  auto types = reducibleTypes();
  if (wideMode()) return types;
  types.push_back(trncclFloat8e4m3);
  types.push_back(trncclFloat8e5m2);
  return types;
}
inline std::vector<trncclRedOp_t> allOps() {
  if (wideMode()) return {trncclSum, trncclMax, trncclAvg};
  return {trncclSum, trncclProd, trncclMax, trncclMin, trncclAvg};
}
// TRNCCL_TEST_QUICK=1 (the sanitizer run) drops the 1 Mi + 3 count.
inline bool quickMode() {
  return testFlag("TRNCCL_TEST_QUICK");
}
inline std::vector<size_t> sweepCounts() {
  if (quickMode()) return {0, 1, 7, 1023};
  return {0, 1, 7, 1023, (1u << 20) + 3};
}
// Bytes move alike whatever the type: the data-movement collectives run their large count for
// this one type of each element size.
inline bool representsItsSize(trncclDataType_t type) {
  return type == trncclInt8 || type == trncclBfloat16 || type == trncclFloat32 ||
         type == trncclInt64;
}
// The data-movement collectives' counts for one type.
inline std::vector<size_t> sweepCounts(trncclDataType_t type) {
  std::vector<size_t> counts = sweepCounts();
  if (!representsItsSize(type) && counts.back() > 1023) counts.pop_back();
  return counts;
}
// The reductions' counts for one type and op. The large count costs every rank a reference
// over every rank's input, so it runs with sum for one type of each element size and for every
// op on fp32: how a large message is cut depends on the element size, and every kernel (type x
// op) runs at every smaller count, 1023 covering its vector loop and its tail.
inline std::vector<size_t> sweepCounts(trncclDataType_t type, trncclRedOp_t op) {
  std::vector<size_t> counts = sweepCounts();
  const bool large = type == trncclFloat32 || (op == trncclSum && representsItsSize(type));
  if (!large && counts.back() > 1023) counts.pop_back();
  return counts;
}

// memcpy that accepts the null pointers of empty buffers (memcpy itself does not).
inline void copyBytes(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

constexpr size_t kGuardBytes = 64;
constexpr char kGuardByte = static_cast<char>(0xA5);

// An output buffer with guard bytes after it, to catch writes past the end. reset() reuses
// the memory (see reference.hpp on why buffers are reused).
struct Guarded {
  Guarded() = default;
  explicit Guarded(size_t bytes, char fill = 0) { reset(bytes, fill); }
  void reset(size_t newBytes, char fill = 0) {
    bytes = newBytes;
    data.assign(bytes, fill);  // keeps the capacity: no fresh pages per call
    data.insert(data.end(), kGuardBytes, kGuardByte);
  }
  char* ptr() { return data.data(); }
  bool guardIntact() const {
    for (size_t i = bytes; i < data.size(); ++i)
      if (data[i] != kGuardByte) return false;
    return true;
  }
  Bytes data;
  size_t bytes = 0;
};

// Records a failure when got differs from want, naming the first bad element.
void expectSame(Failures& f, const std::string& what, const void* got, const void* want,
                size_t count, trncclDataType_t dtype);

// Initialises a communicator in a rank body; on failure returns the error text.
std::string initComm(trncclComm_t* comm, int nranks, const trncclUniqueId& id, int rank);

// Runs body on n rank processes, each with a communicator made after setup(rank) set its
// environment, and destroyed after body; failures of init, body or destroy are the outcome.
std::vector<RankOutcome> withComm(
    int n, const std::function<void(int rank)>& setup,
    const std::function<void(Failures&, trncclComm_t, int rank, int nranks)>& body);

uint64_t saltOf(int a, int b, size_t c);

}  // namespace trnccl::testing
