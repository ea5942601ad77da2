// Reduce over shared windows. Small messages: one-shot (every rank stages its input and posts;
// the root waits for all, then reduces the windows, reading its own input from its send buffer).
// Large messages on up to 4 ranks: the same a window-sized round at a time (RootReduceRounds);
// on more, the two-shot reduction (split across all ranks), with only the root copying the
// reduced segments out.
#include "collectives/shared_buffers.hpp"
#include "collectives/two_shot.hpp"

namespace trnccl {
namespace {

// The one-shot form in window-sized rounds: every other rank stages round k of its input, and
// after the round's wait the root reduces it (its own part from its send buffer) into its output;
// with every input in trncclMemAlloc memory, the rounds after the first read the peers' inputs
// where they lie. The root alone reads every input, n of them, where the two-shot form's root
// reads about 2 + (n-1)/n inputs' worth (its segment of every input, then every reduced segment
// out of the windows) and every rank synchronises twice per round more. At 2 ranks that made the
// two-shot form 1.9-2.6x slower than this one's work done by the chain (reduce_perf, 1-64 MiB);
// forced direct, two-shot against this form, 2 rounds, 1 / 4 / 16 MiB (us): 3 ranks 168-177 /
// 673-853 / 3134-3160 against 97-115 / 490-543 / 1887-1911, 4 ranks 246-259 / 1029-1062 /
// 4524-4899 against 153-213 / 657-986 / 3336-4222 (more ranks than cores; 5 and 8 ranks on the
// same 2 cores still favoured this form, but with a core per rank the root's n reads should
// outgrow the split reduction, which is not measured here: from 5 ranks the two-shot form
// stays). The sum is in rank order either way, so every form gives the same bits.
struct RootReduceRounds {
  const CollArgs& a;
  const CommView& c;
  size_t esize = elementSize(a);
  size_t perRound = c.windowBytes / esize;

  size_t rounds() const { return ceilDiv(a.count, perRound); }
  size_t roundLen(size_t k) const { return std::min(perRound, a.count - k * perRound); }
  void stage(ScheduleBuilder& b, int slot, size_t k) const {
    if (c.rank != a.root)
      b.copy(c.window(c.rank, slot), byteAt(a.sendbuff, k * perRound * esize), roundLen(k) * esize);
  }
  void reduceAtRoot(ScheduleBuilder& b, int slot, size_t k) const {
    if (c.rank != a.root) return;
    const size_t offset = k * perRound * esize;
    b.reduce(
        byteAt(a.recvbuff, offset), c.nranks,
        [&](int q) {
          return q == c.rank ? byteAt(a.sendbuff, offset)
                             : static_cast<const void*>(c.window(q, slot));
        },
        roundLen(k), a.op == trncclAvg ? c.nranks : 0);
  }
  void runRounds(ScheduleBuilder& b, size_t first, bool publish) const {
    directRoundsFrom(
        b, a, first, std::max<size_t>(rounds(), 1), publish,
        [&](int slot, size_t k) { stage(b, slot, k); },
        [&](int slot, size_t k) { reduceAtRoot(b, slot, k); });
  }
  void finishFirstRound(ScheduleBuilder& later, int slot) const { reduceAtRoot(later, slot, 0); }
  // Rounds 1.. out of the peers' inputs; every rank stays until the root has read them.
  void singleCopyRest(ScheduleBuilder& later) const {
    if (c.rank == a.root)
      for (size_t k = 1; k < rounds(); ++k) {
        const size_t offset = k * perRound * esize;
        reduceFromPeers(later, a, c, byteAt(a.recvbuff, offset), byteAt(a.sendbuff, offset), offset,
                        roundLen(k));
      }
    later.waitAll(later.post());
  }
};

constexpr int kRootReduceRoundsMaxRanks = 4;

}  // namespace

// Unlike all-reduce's one-shot (every rank reduces every input), here only the root reduces,
// so the one-shot does no redundant work: it is limited by the window and by how much the
// root alone should read (n inputs) before splitting the reduction across ranks pays for the
// extra synchronisation. 2 ranks, and 4 ranks on 2 cores, reduce_perf 32-256 KiB: one-shot
// took 0.5-0.7x the two-shot's time.
constexpr size_t kRootReadBudget = 1 << 20;

Status reduceDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t bytes = a.count * elementSize(a);
  if (c.nranks <= kRootReduceRoundsMaxRanks && bytes > c.windowBytes) {
    const SharedNeed need{bytes, 0};
    windowsOrSingleCopy(
        b, a, c, need, [&] { return ownBuffersShared(a, c, need); },
        [](const CollArgs& args, const CommView& view) {
          return RootReduceRounds{args, view};
        });
    return Status::ok();
  }
  if (bytes > c.windowBytes || bytes * c.nranks > kRootReadBudget) {
    twoShotDirect(b, a, c, a.root);
    return Status::ok();
  }
  // Only the root waits: a non-root stages its input, posts and returns, as an eager send
  // would. Its window slot is reused two calls later, once every rank (the root included,
  // which posts only after reducing) has posted again: that is the flow control. The root's
  // wait is also where the calls of all ranks are compared.
  const int n = c.nranks;
  b.publishDescriptor(describe(a));
  const int slot = b.acquireSlot();
  if (c.rank != a.root) {
    b.copy(c.window(c.rank, slot), a.sendbuff, bytes);
    b.post();
  } else {
    b.waitAll(b.post());
    b.checkDescriptors();
    b.reduce(
        a.recvbuff, n,
        [&](int q) {
          return q == c.rank ? a.sendbuff : static_cast<const void*>(c.window(q, slot));
        },
        a.count, a.op == trncclAvg ? n : 0);
  }
  b.releaseSlotAt(slot, b.nextPostValue());
  return Status::ok();
}

}  // namespace trnccl
