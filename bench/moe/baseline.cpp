#include "moe/baseline.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>

namespace trnccl::bench::moe {

Baseline::Baseline(Over over, trncclComm_t comm, int rank, int nranks, const Shape& shape)
    : over_(over), comm_(comm), rank_(rank), nranks_(nranks), shape_(shape) {}

bool Baseline::countsExchange(const std::vector<int>& sendCounts, std::vector<int>* recvCounts) {
  const int L = shape_.experts / nranks_;
  recvCounts->assign(sendCounts.size(), 0);
  if (over_ == Over::kMpi)
    return MPI_Alltoall(sendCounts.data(), L, MPI_INT, recvCounts->data(), L, MPI_INT,
                        MPI_COMM_WORLD) == MPI_SUCCESS;
  return trncclAllToAll(sendCounts.data(), recvCounts->data(), L, trncclInt32, comm_) ==
         trncclSuccess;
}

bool Baseline::exchange(const void* send, const std::vector<size_t>& sendRows, void* recv,
                        const std::vector<size_t>& recvRows, size_t row) {
  const int n = nranks_;
  if (over_ == Over::kMpi) {
    // MPI counts are ints: in bytes they overflow past 2 GiB, far beyond these shapes.
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    for (int q = 0, s = 0, r = 0; q < n; ++q) {
      sc[q] = static_cast<int>(sendRows[q] * row);
      rc[q] = static_cast<int>(recvRows[q] * row);
      sd[q] = s;
      rd[q] = r;
      s += sc[q];
      r += rc[q];
    }
    return MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(), MPI_BYTE,
                         MPI_COMM_WORLD) == MPI_SUCCESS;
  }
  std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
  for (int q = 0; q < n; ++q) {
    sc[q] = sendRows[q] * row;
    rc[q] = recvRows[q] * row;
    sd[q] = q ? sd[q - 1] + sc[q - 1] : 0;
    rd[q] = q ? rd[q - 1] + rc[q - 1] : 0;
  }
  return trncclAllToAllv(send, sc.data(), sd.data(), recv, rc.data(), rd.data(), trncclUint8,
                         comm_) == trncclSuccess;
}

bool Baseline::roundTrip(const Workload& w, void* out) {
  const Shape& s = shape_;
  const int n = nranks_, L = s.experts / n, K = s.topk;
  // fp8: a row travels with its token's scale after it (one all-to-all-v, as frameworks pack
  // them), the experts dequantize it and answer in bf16.
  const size_t payload = s.rowBytes(), row = payload + (s.fp8() ? sizeof(float) : 0);
  const size_t back = s.combineRowBytes();
  // Per-expert counts, exchanged; the host waits for them before it can size anything.
  std::vector<int> perExpert(s.experts, 0), fromPeers;
  for (int64_t e : w.topkIdx)
    if (e >= 0) ++perExpert[e];
  if (!countsExchange(perExpert, &fromPeers)) return false;
  std::vector<size_t> sendRows(n, 0), recvRows(n, 0);
  for (int q = 0; q < n; ++q)
    for (int l = 0; l < L; ++l) {
      sendRows[q] += perExpert[q * L + l];
      recvRows[q] += fromPeers[q * L + l];
    }
  // Permute: one row per (token, expert) pair, in expert order (a counting sort).
  std::vector<size_t> next(s.experts + 1, 0);
  for (int e = 0; e < s.experts; ++e) next[e + 1] = next[e] + perExpert[e];
  const size_t pairs = next[s.experts];
  slotOfPair_.assign(s.tokens * K, SIZE_MAX);
  sendBuf_.resize(pairs * row);
  for (size_t t = 0; t < s.tokens; ++t)
    for (int k = 0; k < K; ++k) {
      const int64_t e = w.topkIdx[t * K + k];
      if (e < 0) continue;
      const size_t slot = next[e]++;
      slotOfPair_[t * K + k] = slot;
      std::memcpy(&sendBuf_[slot * row], &w.tokens[t * payload], payload);
      if (s.fp8()) std::memcpy(&sendBuf_[slot * row + payload], &w.scales[t], sizeof(float));
    }
  size_t received = 0;
  for (size_t r : recvRows) received += r;
  recvBuf_.resize(received * row);
  backBuf_.resize(pairs * back);
  if (!exchange(sendBuf_.data(), sendRows, recvBuf_.data(), recvRows, row)) return false;
  // (The experts would run here; identity experts return what came in, dequantized if fp8.)
  const char* expertOut = recvBuf_.data();
  if (s.fp8()) {
    const auto start = std::chrono::steady_clock::now();
    expertBuf_.resize(received * back);
    for (size_t r = 0; r < received; ++r) {
      float scale;
      std::memcpy(&scale, &recvBuf_[r * row + payload], sizeof scale);
      dequantizeRows(s.dtype, &recvBuf_[r * row], &scale, 1, s.hidden, &expertBuf_[r * back]);
    }
    expertOut = expertBuf_.data();
    expertUs_ +=
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  }
  if (!exchange(expertOut, recvRows, backBuf_.data(), sendRows, back)) return false;
  // Inverse permute fused with the weighted sum, as a framework's fused kernel would do it:
  // each token gathers its rows (ascending expert order) into one fp32 row that stays in the
  // cache, then stores it (vectorized row loops).
  acc_.resize(s.hidden);
  std::vector<std::pair<size_t, size_t>> rows;  // (permuted row, pair) of one token
  for (size_t t = 0; t < s.tokens; ++t) {
    rows.clear();
    for (int k = 0; k < K; ++k)
      if (slotOfPair_[t * K + k] != SIZE_MAX) rows.emplace_back(slotOfPair_[t * K + k], t * K + k);
    std::sort(rows.begin(), rows.end());
    std::fill(acc_.begin(), acc_.end(), 0.0f);
    for (const auto& [slot, pair] : rows)
      addScaledRow(s.combineType(), w.weights[pair], &backBuf_[slot * back], acc_.data(), s.hidden);
    storeRow(s.combineType(), acc_.data(), static_cast<char*>(out) + t * back, s.hidden);
  }
  sentBytes_ = (pairs - sendRows[rank_]) * payload;  // the tokens, as the engine counts
  return true;
}

}  // namespace trnccl::bench::moe
