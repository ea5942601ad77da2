// All-gather over shared windows: each round stages a window of this rank's input, then every
// rank copies every staged window into its output (its own too, unless in place). Blocks of
// CommView::cma's band are read straight out of the peers' inputs instead (CMA). Blocks
// up to TRNCCL_LL_MAX_BYTES go through the small-message lines instead (one line transfer per 56
// bytes per peer, no counter synchronisation).
#include "collectives/direct_rounds.hpp"

namespace trnccl {

Status allGatherDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t esize = elementSize(a);
  const size_t bytes = a.count * esize;
  if (bytes > 0 && bytes <= c.llMaxBytes && c.nranks <= shm::kLLMaxRanks) {
    // Tiny blocks: data and flag share cache lines, as in the all-reduce (segment.hpp, LLLine).
    b.publishDescriptor(describe(a));
    auto ll = b.nextLLSlot();
    b.llWrite(ll, a.sendbuff, bytes);
    b.llGather(ll, a.sendbuff, a.recvbuff, bytes);
    return Status::ok();
  }
  // In place, this rank's block already sits where the output wants it.
  const bool inPlace = a.sendbuff == byteAt(a.recvbuff, c.rank * a.count * esize);
  if (c.readsByCma(CollKind::kAllGather, bytes)) {
    cmaExchange(b, a, a.sendbuff, [&] {
      for (int q = 0; q < c.nranks; ++q)
        if (q != c.rank) b.cmaRead(byteAt(a.recvbuff, q * bytes), q, 0, bytes);
      if (!inPlace) b.copy(byteAt(a.recvbuff, c.rank * bytes), a.sendbuff, bytes);
    });
    return Status::ok();
  }
  const size_t perRound = c.windowBytes / esize;
  auto roundLen = [&](size_t k) { return std::min(perRound, a.count - k * perRound); };
  directRounds(
      b, a, ceilDiv(a.count, perRound), true,
      [&](int slot, size_t k) {
        b.copy(c.window(c.rank, slot), byteAt(a.sendbuff, k * perRound * esize),
               roundLen(k) * esize);
      },
      [&](int slot, size_t k) {
        for (int q = 0; q < c.nranks; ++q)
          if (q != c.rank || !inPlace)
            b.copy(byteAt(a.recvbuff, (q * a.count + k * perRound) * esize), c.window(q, slot),
                   roundLen(k) * esize);
      });
  return Status::ok();
}

}  // namespace trnccl
