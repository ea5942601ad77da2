#include "collectives/two_shot.hpp"

#include "collectives/shared_buffers.hpp"

namespace trnccl {
namespace {

// The windows form's rounds and phases. References only: the single-copy check's callback,
// which outlives the call that built it, makes one over its own copies of the arguments.
struct TwoShot {
  const CollArgs& a;
  const CommView& c;
  int copyOutRank;
  size_t esize = elementSize(a);
  size_t perRound = c.windowBytes / esize;
  size_t align = 64 / esize;  // segments start on cache lines

  size_t rounds() const { return ceilDiv(a.count, perRound); }
  size_t roundLen(size_t k) const { return std::min(perRound, a.count - k * perRound); }
  size_t segLen(size_t len) const { return ceilDiv(ceilDiv(len, c.nranks), align) * align; }
  size_t segBegin(size_t len, int q) const { return std::min(len, q * segLen(len)); }
  size_t segEnd(size_t len, int q) const { return std::min(len, (q + 1) * segLen(len)); }
  int avg() const { return a.op == trncclAvg ? c.nranks : 0; }

  // Only the parts other ranks reduce: this rank reduces its own part out of its input, so
  // staging it would be a copy nobody reads (a fifth of the bytes a 2-rank call moves).
  void stage(ScheduleBuilder& b, int slot, size_t k) const {
    const size_t len = roundLen(k), base = k * perRound;
    const size_t mineBegin = segBegin(len, c.rank), mineEnd = segEnd(len, c.rank);
    if (mineBegin > 0)
      b.copy(c.window(c.rank, slot), byteAt(a.sendbuff, base * esize), mineBegin * esize);
    if (mineEnd < len)
      b.copy(c.window(c.rank, slot) + mineEnd * esize, byteAt(a.sendbuff, (base + mineEnd) * esize),
             (len - mineEnd) * esize);
  }
  // In rank order (the same bits on every rank), this rank's own part straight from its input;
  // in place, the copy-out that overwrites it comes after this reduction. An all-reduce
  // reduces into its own output and then copies the part into its window for the peers:
  // reducing straight into the window, whose lines the peers read the last time the slot was
  // used, took 1.1-2.3x as long per call at 2 ranks, 64 KiB-256 MiB (docs/PERFORMANCE.md,
  // "Two-shot all-reduce reduces into its output"); why the reduction's stores into lines the
  // peers read the last time the slot was used cost so much more than a copy's is not known.
  void reduce(ScheduleBuilder& b, int slot, size_t k) const {
    size_t len = roundLen(k);
    size_t begin = segBegin(len, c.rank) * esize;
    const void* mine = byteAt(a.sendbuff, k * perRound * esize + begin);
    const size_t n = segEnd(len, c.rank) - segBegin(len, c.rank);
    const bool allReduce = copyOutRank < 0;
    char* out = allReduce ? byteAt(a.recvbuff, k * perRound * esize + begin)
                          : c.window(c.rank, slot) + begin;
    b.reduce(
        out, c.nranks, [&](int q) { return q == c.rank ? mine : c.window(q, slot) + begin; }, n,
        avg());
    if (allReduce) b.copy(c.window(c.rank, slot) + begin, out, n * esize);
  }
  // The parts out of the windows; an all-reduce's own part is in its output already.
  void copyOut(ScheduleBuilder& b, int slot, size_t k) const {
    if (copyOutRank >= 0 && c.rank != copyOutRank) return;
    size_t len = roundLen(k);
    for (int q = 0; q < c.nranks; ++q) {
      if (copyOutRank < 0 && q == c.rank) continue;
      size_t begin = segBegin(len, q);
      b.copy(byteAt(a.recvbuff, (k * perRound + begin) * esize), c.window(q, slot) + begin * esize,
             (segEnd(len, q) - begin) * esize);
    }
  }
  // reduce() out of every rank's input where it lies (the descriptors are published) instead
  // of out of the windows: round k without its staging.
  void reduceMapped(ScheduleBuilder& later, int slot, size_t k) const {
    const size_t len = roundLen(k);
    const size_t from = k * perRound + segBegin(len, c.rank);
    reduceFromPeers(later, a, c, c.window(c.rank, slot) + segBegin(len, c.rank) * esize,
                    byteAt(a.sendbuff, from * esize), from * esize,
                    segEnd(len, c.rank) - segBegin(len, c.rank));
  }
  // Rounds first.. (at least round 0).
  void runRounds(ScheduleBuilder& b, size_t first, bool publish) const {
    directRoundsFrom(
        b, a, first, std::max<size_t>(rounds(), 1), publish,
        [&](int slot, size_t k) { stage(b, slot, k); },
        [&](int slot, size_t k) { reduce(b, slot, k); },
        [&](int slot, size_t k) { copyOut(b, slot, k); });
  }

  void finishFirstRound(ScheduleBuilder& later, int slot) const {
    reduce(later, slot, 0);
    later.waitAll(later.post());
    copyOut(later, slot, 0);
  }
  void singleCopyRest(ScheduleBuilder& later) const {
    if (copyOutRank < 0) {
      singleCopyRounds(later, 1);
      return;
    }
    // Reduce: each round's parts are reduced out of the inputs into the windows, and the root
    // copies them out. The wait between the two phases of the last round is where every rank
    // has finished reading the inputs, so no wait is added.
    directRoundsFrom(
        later, a, 1, rounds(), false, [&](int s, size_t k) { reduceMapped(later, s, k); },
        [&](int s, size_t k) { copyOut(later, s, k); });
  }

  // The single-copy all-reduce, rounds first..: per round this rank reduces its part out of
  // every rank's input (read where it lies), posts, and copies the other parts out of their
  // owners' outputs; a last post and wait keep every rank in the call until its peers are done
  // reading its buffers. The rounds and parts are the windows', reduced in rank order, so the
  // results are bitwise the same. Rounds keep what one rank wrote in its cache until its peers
  // read it (one pass over the whole buffer would send every part through memory twice).
  // In place is safe: a rank writes only its own part of a round, which no peer reads until
  // its post, and overwrites the others' parts only after their owners' posts say they have
  // read them.
  void singleCopyRounds(ScheduleBuilder& later, size_t first) const {
    for (size_t k = first; k < rounds(); ++k) {
      const size_t len = roundLen(k);
      const size_t base = k * perRound;
      auto at = [&](int q) { return (base + segBegin(len, q)) * esize; };
      auto bytesOf = [&](int q) { return (segEnd(len, q) - segBegin(len, q)) * esize; };
      reduceFromPeers(later, a, c, byteAt(a.recvbuff, at(c.rank)), byteAt(a.sendbuff, at(c.rank)),
                      at(c.rank), bytesOf(c.rank) / esize);
      later.waitAll(later.post());
      for (int q = 0; q < c.nranks; ++q)
        if (q != c.rank)
          later.cmaRead(byteAt(a.recvbuff, at(q)), q, at(q), bytesOf(q),
                        ScheduleBuilder::PeerBuffer::kRecv);
    }
    later.waitAll(later.post());  // peers are done reading this rank's buffers
  }
};

}  // namespace

void twoShotDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c, int copyOutRank) {
  const size_t bytes = a.count * elementSize(a);
  // All-reduce reads peers' inputs and outputs; reduce only the inputs (its parts go through
  // the windows to the root).
  const SharedNeed need{bytes, copyOutRank < 0 ? bytes : 0};
  windowsOrSingleCopy(
      b, a, c, need, [&] { return ownBuffersShared(a, c, need); },
      [copyOutRank](const CollArgs& args, const CommView& view) {
        return TwoShot{args, view, copyOutRank};
      });
}

}  // namespace trnccl
