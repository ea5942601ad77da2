#include "moe/baseline.hpp"

#include <mpi.h>

#include <cstring>

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
                        const std::vector<size_t>& recvRows) {
  const size_t row = shape_.rowBytes();
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
  const size_t row = s.rowBytes();
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
  order_.resize(pairs);
  sendBuf_.resize(pairs * row);
  for (size_t t = 0; t < s.tokens; ++t)
    for (int k = 0; k < K; ++k) {
      const int64_t e = w.topkIdx[t * K + k];
      if (e < 0) continue;
      const size_t slot = next[e]++;
      order_[slot] = t * K + k;
      std::memcpy(&sendBuf_[slot * row], &w.tokens[t * row], row);
    }
  size_t received = 0;
  for (size_t r : recvRows) received += r;
  recvBuf_.resize(received * row);
  backBuf_.resize(pairs * row);
  if (!exchange(sendBuf_.data(), sendRows, recvBuf_.data(), recvRows)) return false;
  // (The experts would run here; identity experts return what came in.)
  if (!exchange(recvBuf_.data(), recvRows, backBuf_.data(), sendRows)) return false;
  // Inverse permute and weighted sum, accumulated in fp32 per token (vectorized row loops,
  // as a framework's fused kernel would be).
  acc_.assign(s.tokens * s.hidden, 0.0f);
  for (size_t slot = 0; slot < pairs; ++slot) {
    const size_t pair = order_[slot], t = pair / K;
    addScaledRow(s.dtype, w.weights[pair], &backBuf_[slot * row], &acc_[t * s.hidden], s.hidden);
  }
  for (size_t t = 0; t < s.tokens; ++t)
    storeRow(s.dtype, &acc_[t * s.hidden], static_cast<char*>(out) + t * row, s.hidden);
  sentBytes_ = (pairs - sendRows[rank_]) * row;
  return true;
}

}  // namespace trnccl::bench::moe
