// Broadcast over shared windows: the root stages a window-sized round, every other rank copies
// it out of the root's window.
#include "collectives/direct_rounds.hpp"

namespace trnccl {

Status broadcastDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t bytes = a.count * elementSize(a);
  const size_t perRound = c.windowBytes;
  auto roundLen = [&](size_t k) { return std::min(perRound, bytes - k * perRound); };
  const bool isRoot = c.rank == a.root;
  // Single copy: every other rank reads the root's buffer (CMA).
  if (c.readsByCma(CollKind::kBroadcast, bytes)) {
    cmaExchange(b, a, a.sendbuff, [&] {
      if (isRoot)
        b.copy(a.recvbuff, a.sendbuff, bytes);
      else
        b.cmaRead(a.recvbuff, a.root, 0, bytes);
    });
    return Status::ok();
  }
  if (isRoot) b.copy(a.recvbuff, a.sendbuff, bytes);
  directRounds(
      b, a, ceilDiv(bytes, perRound), true,
      [&](int slot, size_t k) {
        if (isRoot) b.copy(c.window(c.rank, slot), byteAt(a.sendbuff, k * perRound), roundLen(k));
      },
      [&](int slot, size_t k) {
        if (!isRoot) b.copy(byteAt(a.recvbuff, k * perRound), c.window(a.root, slot), roundLen(k));
      });
  return Status::ok();
}

}  // namespace trnccl
