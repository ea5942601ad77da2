// All-gather over shared windows: each round stages a window of this rank's input, then every
// rank copies every staged window into its output (its own too, unless in place). Blocks of
// CommView::cma's band are read straight out of the peers' inputs instead (CMA), and so are
// larger blocks when every rank's input is trncclMemAlloc memory (mapped, after round 0;
// collectives/shared_buffers.hpp). Blocks up to TRNCCL_LL_MAX_BYTES go through the
// small-message lines instead (one line transfer per 56 bytes per peer, no counter
// synchronisation).
#include "collectives/shared_buffers.hpp"

namespace trnccl {
namespace {

// The windows form's phases. References only (see two_shot.cpp's TwoShot).
struct AllGatherWindows {
  const CollArgs& a;
  const CommView& c;
  size_t esize = elementSize(a);
  size_t bytes = a.count * esize;  // per rank
  size_t perRound = c.windowBytes / esize;
  // In place, this rank's block already sits where the output wants it.
  bool inPlace = a.sendbuff == byteAt(a.recvbuff, c.rank* bytes);

  size_t rounds() const { return ceilDiv(a.count, perRound); }
  size_t roundLen(size_t k) const { return std::min(perRound, a.count - k * perRound); }
  void stage(ScheduleBuilder& b, int slot, size_t k) const {
    b.copy(c.window(c.rank, slot), byteAt(a.sendbuff, k * perRound * esize), roundLen(k) * esize);
  }
  void copyOwn(ScheduleBuilder& b, size_t k) const {
    if (!inPlace)
      b.copy(byteAt(a.recvbuff, (c.rank * a.count + k * perRound) * esize),
             byteAt(a.sendbuff, k * perRound * esize), roundLen(k) * esize);
  }
  void copyPeers(ScheduleBuilder& b, int slot, size_t k) const {
    for (int q = 0; q < c.nranks; ++q)
      if (q != c.rank)
        b.copy(byteAt(a.recvbuff, (q * a.count + k * perRound) * esize), c.window(q, slot),
               roundLen(k) * esize);
  }
  // This rank's own block is copied out of its input while the peers stage theirs.
  void runRounds(ScheduleBuilder& b, size_t first, bool publish) const {
    directRoundsOverlapped(
        b, a, first, std::max<size_t>(rounds(), 1), publish,
        [&](int slot, size_t k) { stage(b, slot, k); }, [&](int, size_t k) { copyOwn(b, k); },
        [&](int slot, size_t k) { copyPeers(b, slot, k); });
  }
  // Everything after `from` bytes of each block: out of the peers' inputs where they lie (the
  // descriptors are published), this rank's own from its input. The caller's last post and
  // wait keep every rank in the call while its peers read its input. In place is safe: peers
  // read only this rank's own block of the output, which it does not write.
  void singleCopyFrom(ScheduleBuilder& later, size_t from) const {
    for (int q = 0; q < c.nranks; ++q)
      if (q != c.rank)
        later.cmaRead(byteAt(a.recvbuff, q * bytes + from), q, from, bytes - from);
      else if (!inPlace)
        later.copy(byteAt(a.recvbuff, q * bytes + from), byteAt(a.sendbuff, from), bytes - from);
  }
  void finishFirstRound(ScheduleBuilder& later, int slot) const {
    copyOwn(later, 0);
    copyPeers(later, slot, 0);
  }
  void singleCopyRest(ScheduleBuilder& later) const {
    singleCopyFrom(later, perRound * esize);
    later.waitAll(later.post());
  }
};

}  // namespace

Status allGatherDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const AllGatherWindows plan{a, c};
  const size_t bytes = plan.bytes;
  if (bytes > 0 && bytes <= c.llMaxBytes && c.nranks <= shm::kLLMaxRanks) {
    // Tiny blocks: data and flag share cache lines, as in the all-reduce (segment.hpp, LLLine).
    b.publishDescriptor(describe(a));
    auto ll = b.nextLLSlot();
    b.llWrite(ll, a.sendbuff, bytes);
    b.llGather(ll, a.sendbuff, a.recvbuff, bytes);
    return Status::ok();
  }
  if (c.readsByCma(CollKind::kAllGather, bytes)) {
    cmaExchange(b, a, a.sendbuff, [&] { plan.singleCopyFrom(b, 0); });
    return Status::ok();
  }
  const SharedNeed need{bytes, 0};
  windowsOrSingleCopy(
      b, a, c, need, [&] { return ownBuffersShared(a, c, need); },
      [](const CollArgs& args, const CommView& view) {
        return AllGatherWindows{args, view};
      });
  return Status::ok();
}

}  // namespace trnccl
