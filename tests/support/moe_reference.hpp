// The TokenSwitch tests' serial reference: every rank generates every rank's routing and
// tokens from the same seeds and simulates the whole exchange in its own process, then
// compares what the engine delivered. Values are small integers and weights powers of two,
// so every sum is exact in bf16, fp16 and fp32 whatever the order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "support/multirank.hpp"
#include "support/reference.hpp"
#include "trnccl.h"

namespace trnccl::testing {

// ---- values in the payload types, converted by the test itself (typeSize: reference.hpp) ----
void storeValue(trncclDataType_t t, void* base, size_t i, float v);
float loadValue(trncclDataType_t t, const void* base, size_t i);

// ---- one step's routing, the same on every rank ----
struct Shape {
  size_t T;  // tokens per rank
  int K, E;
  size_t H;
  bool skew;  // every token's first choice is expert 0
};

// Rank `rank`'s topk_idx [T, K]: about one entry in six is -1.
std::vector<int64_t> routingOf(int rank, const Shape& s, uint64_t salt);
float tokenValue(int rank, size_t t, size_t h);
float weightOf(int rank, size_t t, int k);
float expertScale(int id);  // the reference experts multiply by 1 or 2

// ---- the serial reference of what rank `me` receives ----
struct Slot {
  int src;
  size_t token;
  std::vector<int64_t> ids;  // flat: local ids ascending; expert-major: the one id
  std::vector<float> weights;
};
std::vector<Slot> expectedReceive(int me, int n, const Shape& s, uint64_t salt, bool flat);

// What combine must give token t of rank me: flat rows come back as row * scale(dest rank);
// expert-major slots as slot * scale(local id) (* weight when weighted).
float expectedCombined(int me, int n, const Shape& s, const std::vector<int64_t>& idx, size_t t,
                       size_t h, bool flat, bool weighted);

// ---- groups, routings and whole steps ----
trncclEpGroup_t makeGroup(Failures& f, trncclComm_t comm, int n, int E, int maxTokens,
                          trncclDataType_t type, size_t H,
                          trncclEpMode_t mode = trncclEpModeNormal);

// The routing of `idx` (int64 [s.T, s.K]), or nullptr after recording why under `what`.
trncclEpRouting_t createRouting(Failures& f, trncclEpGroup_t group, const std::vector<int64_t>& idx,
                                const Shape& s, trncclEpLayout_t layout,
                                const std::string& what = "");

// Combines expertOut (rows or slots in `type`, as the reference experts make them: see
// runStep), unweighted and (expert-major) weighted, and checks every token against
// expectedCombined and that nothing was written past the output.
void checkCombine(Failures& f, trncclEpRouting_t routing, const void* expertOut, int me, int n,
                  const Shape& s, const std::vector<int64_t>& idx, trncclDataType_t type, bool flat,
                  const std::string& what);

// One routing + dispatch + combine, checked against the reference. worst: 0 in the normal
// mode; in the low-latency mode the rows or slots the outputs must hold (the counts are known
// only after the dispatch).
void runStep(Failures& f, trncclEpGroup_t group, int me, int n, const Shape& s,
             trncclDataType_t type, trncclEpLayout_t layout, bool async, uint64_t salt,
             size_t worst = 0);

// The environment a rank needs for a layout: "shm" (one node, direct), "rings" (one node,
// TRNCCL_MOE_DIRECT=0), "nodes" (2 emulated nodes, alternating ranks), "nodes_rings" (the
// same with TRNCCL_MOE_DIRECT=0), "nodes3" (3 nodes).
void setupLayout(const std::string& layout, int rank);

// ---- errors ----
std::string lastErrorOf(trncclComm_t comm);
// Records a failure unless rc is `want` and the message holds every one of `mentions`.
void expectError(Failures& f, const char* what, trncclResult_t rc, trncclResult_t want,
                 const std::string& message, const std::vector<std::string>& mentions);

}  // namespace trnccl::testing
