// Broadcast over shared windows: the root stages a window-sized round, every other rank copies
// it out of the root's window. In the CMA band every other rank reads the root's buffer
// instead, and beyond it too when the root's buffer is trncclMemAlloc memory (mapped, after
// round 0; collectives/shared_buffers.hpp).
#include "collectives/shared_buffers.hpp"

namespace trnccl {
namespace {

// The windows form's phases. References only (see two_shot.cpp's TwoShot).
struct BroadcastWindows {
  const CollArgs& a;
  const CommView& c;
  size_t bytes = a.count * elementSize(a);
  size_t perRound = c.windowBytes;
  bool isRoot = c.rank == a.root;

  size_t rounds() const { return ceilDiv(bytes, perRound); }
  size_t roundLen(size_t k) const { return std::min(perRound, bytes - k * perRound); }
  void stage(ScheduleBuilder& b, int slot, size_t k) const {
    if (isRoot) b.copy(c.window(c.rank, slot), byteAt(a.sendbuff, k * perRound), roundLen(k));
  }
  void copyOut(ScheduleBuilder& b, int slot, size_t k) const {
    if (!isRoot) b.copy(byteAt(a.recvbuff, k * perRound), c.window(a.root, slot), roundLen(k));
  }
  // The root's own output, out of place: its part of each round between its post and its wait,
  // while the readers copy.
  void copyOwn(ScheduleBuilder& b, size_t from, size_t len) const {
    if (isRoot && a.sendbuff != a.recvbuff)
      b.copy(byteAt(a.recvbuff, from), byteAt(a.sendbuff, from), len);
  }
  void runRounds(ScheduleBuilder& b, size_t first, bool publish) const {
    directRoundsOverlapped(
        b, a, first, std::max<size_t>(rounds(), 1), publish,
        [&](int slot, size_t k) { stage(b, slot, k); },
        [&](int, size_t k) { copyOwn(b, k * perRound, roundLen(k)); },
        [&](int slot, size_t k) { copyOut(b, slot, k); });
  }
  void finishFirstRound(ScheduleBuilder& later, int slot) const {
    copyOwn(later, 0, roundLen(0));
    copyOut(later, slot, 0);
  }
  void singleCopyRest(ScheduleBuilder& later) const {
    if (isRoot)
      copyOwn(later, perRound, bytes - perRound);
    else
      later.cmaRead(byteAt(a.recvbuff, perRound), a.root, perRound, bytes - perRound);
    later.waitAll(later.post());  // the root stays until every reader is done
  }
};

}  // namespace

Status broadcastDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const BroadcastWindows plan{a, c};
  const size_t bytes = plan.bytes;
  // Single copy: every other rank reads the root's buffer (CMA).
  if (c.readsByCma(CollKind::kBroadcast, bytes)) {
    cmaExchange(b, a, a.sendbuff, [&] {
      if (plan.isRoot)
        b.copy(a.recvbuff, a.sendbuff, bytes);
      else
        b.cmaRead(a.recvbuff, a.root, 0, bytes);
    });
    return Status::ok();
  }
  // Only the root's buffer is read, and only the root knows where it lies: every rank takes
  // the way that decides after round 0 whenever the node lets ranks map each other's memory.
  windowsOrSingleCopy(
      b, a, c, SharedNeed{bytes, 0, a.root}, [&] { return c.mapsPeerMemory(); },
      [](const CollArgs& args, const CommView& view) {
        return BroadcastWindows{args, view};
      });
  return Status::ok();
}

}  // namespace trnccl
