// Bruck's all-to-all: ceil(log2 n) rounds instead of n-1, for small blocks where the rounds'
// latency, not the bytes, is the cost. The blocks are first rotated so that block i is the one
// for rank + i; in round k every block whose index has bit k set goes (packed into one
// message) to rank + 2^k, and the same indices come back from rank - 2^k; in the end block i
// holds what rank - i sent to this rank, and a last pass puts it in place. Each block travels
// up to log2(n) times, so the pairwise exchange takes over as blocks grow. Ranks are the
// communicator's, like the blocks in the buffers.
#include "collectives/direct_rounds.hpp"

namespace trnccl {

Status allToAllBruck(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t block = a.count * elementSize(a);
  const int n = c.nranks, r = c.rank;
  if (n == 1) {
    b.copy(a.recvbuff, a.sendbuff, block);
    return Status::ok();
  }
  // Scratch: the rotated blocks, then one packed message out and one in (at most n/2 + 1
  // blocks each).
  const size_t packedBlocks = n / 2 + 1;
  char* rotated = b.scratch((n + 2 * packedBlocks) * block);
  char* out = rotated + n * block;
  char* in = out + packedBlocks * block;
  auto at = [&](auto* base, int index) { return byteAt(base, static_cast<size_t>(index) * block); };
  b.copy(rotated, at(a.sendbuff, r), (n - r) * block);
  b.copy(at(rotated, n - r), a.sendbuff, r * block);
  for (int d = 1; d < n; d *= 2) {
    // Indices with this bit set come in runs of d consecutive blocks: one copy per run.
    size_t packed = 0;
    for (int run = d; run < n; run += 2 * d) {
      const int length = std::min(d, n - run);
      b.copy(out + packed, at(rotated, run), length * block);
      packed += length * block;
    }
    {
      ConcurrentSteps together(b);
      b.send((r + d) % n, out, packed);
      b.recv((r - d + n) % n, in, packed);
    }
    size_t unpacked = 0;
    for (int run = d; run < n; run += 2 * d) {
      const int length = std::min(d, n - run);
      b.copy(at(rotated, run), in + unpacked, length * block);
      unpacked += length * block;
    }
  }
  for (int i = 0; i < n; ++i) b.copy(at(a.recvbuff, (r - i + n) % n), at(rotated, i), block);
  return Status::ok();
}

}  // namespace trnccl
