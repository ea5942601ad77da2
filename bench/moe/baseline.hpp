// The dispatch frameworks write by hand today (TorchTitan's all-to-all token dispatcher), as
// the benchmark's baseline: exchange per-expert counts with an all-to-all, wait for them on the
// host, permute one copy of each token per (token, expert) pair into expert order, all-to-all-v
// the rows, (experts), all-to-all-v them back, inverse-permute and sum with the routing weights.
// fp8 payloads travel with their per-token scale and come back in bf16, as the engine's do.
// Run over MPI (MPI_Alltoall / MPI_Alltoallv) or over trnccl's own trncclAllToAll(v).
#pragma once

#include <utility>
#include <vector>

#include "moe/workload.hpp"
#include "trnccl.h"

namespace trnccl::bench::moe {

class Baseline {
 public:
  enum class Over { kMpi, kTrnccl };
  Baseline(Over over, trncclComm_t comm, int rank, int nranks, const Shape& shape);
  // One round trip with identity experts; out: tokens x hidden. false on a failed call.
  bool roundTrip(const Workload& w, void* out);
  // Bytes of payload this rank sent to other ranks in the dispatch half of the last trip.
  size_t sentBytes() const { return sentBytes_; }
  // Microseconds spent in the identity experts (fp8: dequantizing) since the last call; the
  // benchmark leaves the experts' compute out of the communication's times.
  double takeExpertUs() { return std::exchange(expertUs_, 0.0); }

 private:
  bool countsExchange(const std::vector<int>& sendCounts, std::vector<int>* recvCounts);
  bool exchange(const void* send, const std::vector<size_t>& sendRows, void* recv,
                const std::vector<size_t>& recvRows, size_t rowBytes);

  Over over_;
  trncclComm_t comm_;
  int rank_, nranks_;
  Shape shape_;
  size_t sentBytes_ = 0;
  double expertUs_ = 0;
  std::vector<char> sendBuf_, recvBuf_, expertBuf_, backBuf_;
  std::vector<size_t> slotOfPair_;  // the permuted row of pair t * topk + k (SIZE_MAX: none)
  std::vector<float> acc_;          // one token's fp32 sum
};

}  // namespace trnccl::bench::moe
