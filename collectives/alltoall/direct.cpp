// All-to-all(v) over shared windows. Tiny all-to-all blocks go through the small-message lines
// instead (one line-aligned block per peer), and blocks in the CMA band are read straight out of
// the peers' send buffers (single copy). A window slot is split into one sub-block per
// destination; each round stages the next sub-block of every outgoing block, and every rank
// copies its sub-block out of every peer's window (out of place with every rank's input in
// trncclMemAlloc memory, the rounds after the first read the blocks where they lie; see
// collectives/shared_buffers.hpp). All-to-all-v first publishes each rank's
// send sizes and offsets, so that receivers check them against their receive counts and all
// ranks agree on the form and the number of rounds (the largest block anywhere decides both).
#include <memory>

#include "collectives/shared_buffers.hpp"

namespace trnccl {
namespace {

struct Blocks {
  std::vector<size_t> sendBytes, sendOffset, recvBytes, recvOffset;
};

// Refills `blocks` (vectors keep their capacity, so a reused Blocks does not allocate).
void fillBlocks(const CollArgs& a, int n, Blocks* blocks) {
  const size_t esize = elementSize(a);
  for (auto* column :
       {&blocks->sendBytes, &blocks->sendOffset, &blocks->recvBytes, &blocks->recvOffset})
    column->resize(n);
  const bool v = a.kind == CollKind::kAllToAllv;
  for (int q = 0; q < n; ++q) {
    blocks->sendBytes[q] = (v ? a.sendcounts[q] : a.count) * esize;
    blocks->sendOffset[q] = (v ? a.sdispls[q] : q * a.count) * esize;
    blocks->recvBytes[q] = (v ? a.recvcounts[q] : a.count) * esize;
    blocks->recvOffset[q] = (v ? a.rdispls[q] : q * a.count) * esize;
  }
}

// Bytes of round k's sub-block of a block of `total` bytes.
size_t roundPart(size_t sub, size_t total, size_t k) {
  return k * sub >= total ? 0 : std::min(sub, total - k * sub);
}

// Round k's part of this rank's own block, straight from send to receive buffer (one copy, not
// two through the window), out of place only; `ownBytes` is how much of it there is (the smaller
// of the two sizes before all-to-all-v's sizes are checked: a call whose own counts disagree
// fails, but reads nothing past its buffers).
void copyOwnRound(ScheduleBuilder& b, const CollArgs& a, const CommView& c, const Blocks* blocks,
                  size_t k, size_t ownBytes) {
  const size_t sub = subBlockBytes(c);
  if (a.sendbuff != a.recvbuff)
    b.copy(byteAt(a.recvbuff, blocks->recvOffset[c.rank] + k * sub),
           byteAt(a.sendbuff, blocks->sendOffset[c.rank] + k * sub), roundPart(sub, ownBytes, k));
}

// Whether this rank's own block is already where it goes: in place, at the same offset in the
// send and the receive layout (all-to-all's uniform blocks; all-to-all-v refuses in place).
bool ownBlockInPlace(const CollArgs& a, const CommView& c, const Blocks* blocks) {
  return a.sendbuff == a.recvbuff && blocks->sendOffset[c.rank] == blocks->recvOffset[c.rank] &&
         blocks->sendBytes[c.rank] == blocks->recvBytes[c.rank];
}

// Round k's first phase: every outgoing sub-block into this rank's window slot; this rank's own,
// out of place, with `withOwn`, straight into the receive buffer (without, the caller copies it
// between its post and its wait, while the peers stage theirs); in place it is where it goes
// already (staging it and copying it back, as the windows form did until session 33, made an
// in-place 64 MiB call on 2 ranks 2.5x slower than out of place).
void stageRound(ScheduleBuilder& b, const CollArgs& a, const CommView& c, const Blocks* blocks,
                int slot, size_t k, size_t ownBytes, bool withOwn) {
  const size_t sub = subBlockBytes(c);
  const bool selfDirect = a.sendbuff != a.recvbuff;
  for (int q = 0; q < c.nranks; ++q) {
    if (q == c.rank && ownBlockInPlace(a, c, blocks)) continue;
    if (q == c.rank && selfDirect) {
      if (withOwn) copyOwnRound(b, a, c, blocks, k, ownBytes);
      continue;
    }
    b.copy(c.window(c.rank, slot) + q * sub, byteAt(a.sendbuff, blocks->sendOffset[q] + k * sub),
           roundPart(sub, blocks->sendBytes[q], k));
  }
}

// Round k's second phase: this rank's sub-block out of every peer's window slot.
void copyOutRound(ScheduleBuilder& b, const CollArgs& a, const CommView& c, const Blocks* blocks,
                  int slot, size_t k) {
  const size_t sub = subBlockBytes(c);
  const bool selfDirect = a.sendbuff != a.recvbuff;
  for (int q = 0; q < c.nranks; ++q)
    if (q != c.rank || (!selfDirect && !ownBlockInPlace(a, c, blocks)))
      b.copy(byteAt(a.recvbuff, blocks->recvOffset[q] + k * sub), c.window(q, slot) + c.rank * sub,
             roundPart(sub, blocks->recvBytes[q], k));
}

// Rounds first..rounds-1 (at least round 0 when first is 0). `blocks` is read only while the
// rounds are built.
void exchangeRounds(ScheduleBuilder& b, const CollArgs& a, const CommView& c, const Blocks* blocks,
                    size_t first, size_t rounds, bool publish) {
  const size_t ownBytes = blocks->recvBytes[c.rank];
  auto stage = [&](int slot, size_t k) {
    stageRound(b, a, c, blocks, slot, k, ownBytes, /*withOwn=*/false);
  };
  auto copyOwn = [&](int, size_t k) { copyOwnRound(b, a, c, blocks, k, ownBytes); };
  auto copyOut = [&](int slot, size_t k) { copyOutRound(b, a, c, blocks, slot, k); };
  // An empty call still runs a round: it checks that peers agree.
  directRoundsOverlapped(b, a, first, first == 0 ? std::max<size_t>(rounds, 1) : rounds, publish,
                         stage, copyOwn, copyOut);
}

// All-to-all's windows form as a plan for windowsOrSingleCopy. Its blocks are filled in a
// per-thread Blocks, read only while rounds are built (small calls take this form too, and
// the allocations would cost as much as their whole data path).
struct AllToAllWindows {
  const CollArgs& a;
  const CommView& c;
  const Blocks* blocks;
  size_t block = a.count * elementSize(a);

  static AllToAllWindows make(const CollArgs& a, const CommView& c) {
    thread_local Blocks uniform;
    fillBlocks(a, c.nranks, &uniform);
    return AllToAllWindows{a, c, &uniform};
  }
  size_t rounds() const { return ceilDiv(block, subBlockBytes(c)); }
  void stage(ScheduleBuilder& b, int slot, size_t k) const {
    stageRound(b, a, c, blocks, slot, k, block, /*withOwn=*/true);
  }
  void runRounds(ScheduleBuilder& b, size_t first, bool publish) const {
    exchangeRounds(b, a, c, blocks, first, rounds(), publish);
  }
  void finishFirstRound(ScheduleBuilder& later, int slot) const {
    copyOutRound(later, a, c, blocks, slot, 0);
  }
  // Out of place only: the rest of every block out of its sender's input.
  void singleCopyRest(ScheduleBuilder& later) const { singleCopyFrom(later, subBlockBytes(c)); }
  // Every block from byte `from` on out of its sender's input (this rank's own copied).
  void singleCopyFrom(ScheduleBuilder& later, size_t from) const {
    for (int q = 0; q < c.nranks; ++q) {
      void* to = byteAt(a.recvbuff, q * block + from);
      if (q != c.rank)
        later.cmaRead(to, q, c.rank * block + from, block - from);
      else
        later.copy(to, byteAt(a.sendbuff, q * block + from), block - from);
    }
    later.waitAll(later.post());  // peers are done reading this rank's input
  }
};

// OpDescriptor::extra of a rank whose all-to-all works in place (allToAllAgreeingOnInPlace).
constexpr uint64_t kWorksInPlace = 1;

// The bytes a rank sends to its peers count against TRNCCL_LL_MAX_BYTES, as a reduce-scatter's
// input does; the lines must also hold one line-aligned block per peer.
bool fitsSmallMessageLines(const CommView& c, size_t block) {
  return block > 0 && c.nranks > 1 && c.nranks <= shm::kLLMaxRanks &&
         (c.nranks - 1) * block <= c.llMaxBytes &&
         shm::llAllToAllLines(c.nranks, block) <= static_cast<size_t>(shm::kLLLines);
}

}  // namespace

void allToAllAgreeingOnInPlace(ScheduleBuilder& b, const CollArgs& a, const CommView& c,
                               BuildFn outOfPlace) {
  publishSingleCopySource(b, a, a.sendbuff, a.sendbuff == a.recvbuff ? kWorksInPlace : 0);
  const uint64_t seq = b.schedule().descriptor.seq;
  b.callback([args = a, view = c, seq, outOfPlace](ScheduleBuilder& later) {
    for (int q = 0; q < view.nranks; ++q)
      if (view.segment->rankArea(q)->descriptors[seq % shm::kDescriptorSlots].extra ==
          kWorksInPlace) {
        AllToAllWindows::make(args, view).runRounds(later, 0, /*publish=*/false);
        return Status::ok();
      }
    return outOfPlace(later, args, view);
  });
}

Status allToAllDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t block = a.count * elementSize(a);  // all-to-all's uniform block
  if (a.kind == CollKind::kAllToAll && fitsSmallMessageLines(c, block)) {
    // Tiny blocks: one block per peer in this rank's small-message lines, data and flag
    // together (segment.hpp, LLLine): no window staging and no counter synchronisation.
    b.publishDescriptor(describe(a));
    auto ll = b.nextLLSlot();
    for (int q = 0; q < c.nranks; ++q)
      if (q != c.rank)
        b.llWrite(ll, byteAt(a.sendbuff, q * block), block,
                  shm::llAllToAllFirstLine(c.rank, q, block));
    b.llAllToAll(ll, byteAt(a.sendbuff, c.rank * block), a.recvbuff, block);
    return Status::ok();
  }
  const size_t sub = subBlockBytes(c);
  // Single copy (CMA): every rank reads its blocks straight out of its peers' inputs, unless
  // one of them works in place (its descriptor says so); then every rank takes the windows,
  // which stage an in-place input a round at a time. (Staging a whole in-place input for its
  // peers to read took 1.4-3.8x the windows' time at 256 KiB-4 MiB on 2 ranks.) The choice
  // follows the descriptors, which every rank reads alike: the schedules' posts must match,
  // and working in place is each rank's own choice.
  if (a.kind == CollKind::kAllToAll && c.readsByCma(CollKind::kAllToAll, block)) {
    auto readPeersInputs = [](ScheduleBuilder& later, const CollArgs& args, const CommView& view) {
      AllToAllWindows::make(args, view).singleCopyFrom(later, 0);
      return Status::ok();
    };
    allToAllAgreeingOnInPlace(b, a, c, readPeersInputs);
    return Status::ok();
  }
  if (a.kind == CollKind::kAllToAll) {
    // Out of place, with every rank's input in trncclMemAlloc memory, the rounds after the
    // first read the blocks where they lie (collectives/shared_buffers.hpp). A rank working in
    // place takes the windows, and its descriptor (naming no buffer) sends its peers there too.
    const SharedNeed need{c.nranks * block, 0};
    windowsOrSingleCopy(
        b, a, c, need, [&] { return a.sendbuff != a.recvbuff && ownBuffersShared(a, c, need); },
        AllToAllWindows::make);
    return Status::ok();
  }
  auto blocks = std::make_shared<Blocks>();
  fillBlocks(a, c.nranks, blocks.get());
  // All-to-all-v: publish sizes (and where each block starts, for peers that read it with CMA)
  // and stage the first round of the windows form beside them, synchronise, then plan from
  // what peers said: single copy when the largest block anywhere is in the CMA band, or when
  // every rank's send buffer is trncclMemAlloc memory and the windows would take more than one
  // round (the staged round goes unused), else the windows, whose first round is then only copied
  // out (the largest block decides the number of rounds). Every rank sees the same descriptors, so
  // all take the same form. Staging the first round early saves a synchronisation, which with more
  // ranks than cores costs a scheduling turn of every rank: 4 ranks on 2 cores, 1-8 KiB, two
  // synchronisations made all-to-all-v 0.59-0.73x Open MPI where all-to-all (one) was 1.0-1.5x.
  size_t maxSend = 0;
  for (size_t bytes : blocks->sendBytes) maxSend = std::max(maxSend, bytes);
  shm::OpDescriptor descriptor = describe(a);
  descriptor.extra = maxSend;
  descriptor.sendAddress = reinterpret_cast<uint64_t>(a.sendbuff);
  shm::findSharedRegion(a.sendbuff, &descriptor.sendRegion);
  b.publishDescriptor(descriptor);
  const uint64_t seq = b.schedule().descriptor.seq;
  b.callback([blocks, c, seq](ScheduleBuilder&) {
    shm::SendBlock* table = c.segment->sendTable(c.rank, seq);
    for (int q = 0; q < c.nranks; ++q) table[q] = {blocks->sendBytes[q], blocks->sendOffset[q]};
    return Status::ok();
  });
  const int firstSlot = b.acquireSlot();
  const size_t ownBytes = std::min(blocks->sendBytes[c.rank], blocks->recvBytes[c.rank]);
  stageRound(b, a, c, blocks.get(), firstSlot, 0, ownBytes, /*withOwn=*/false);
  const uint64_t posted = b.post();
  copyOwnRound(b, a, c, blocks.get(), 0, ownBytes);
  b.waitAll(posted);
  b.checkDescriptors();
  CollArgs args = a;  // the callback outlives this call
  b.callback([blocks, c, seq, args, sub, firstSlot](ScheduleBuilder& later) -> Status {
    size_t globalMax = 0;
    for (int q = 0; q < c.nranks; ++q) {
      const shm::OpDescriptor& d = c.segment->rankArea(q)->descriptors[seq % shm::kDescriptorSlots];
      globalMax = std::max<size_t>(globalMax, d.extra);
      uint64_t theySend = c.segment->sendTable(q, seq)[c.rank].bytes;
      if (theySend != blocks->recvBytes[q]) {
        size_t esize = elementSize(args);
        return makeError(Code::kInvalidUsage,
                         "AllToAllv: rank %d expects recvcounts[%d]=%zu elements from rank %d, "
                         "but rank %d sends sendcounts[%d]=%llu elements",
                         c.rank, q, blocks->recvBytes[q] / esize, q, q, c.rank,
                         static_cast<unsigned long long>(theySend / esize));
      }
    }
    // Beyond the CMA band, send buffers that every rank has in trncclMemAlloc memory are read
    // where they lie too (a mapped read is a plain copy), when the windows would take more
    // than one round; a block outside its sender's allocation is read by CMA (kCmaRead).
    bool allShared = c.mapsPeerMemory() && ceilDiv(globalMax, sub) >= 2;
    for (int q = 0; q < c.nranks && allShared; ++q)
      allShared =
          c.segment->rankArea(q)->descriptors[seq % shm::kDescriptorSlots].sendRegion.id != 0;
    if (!c.readsByCma(CollKind::kAllToAllv, globalMax) && !allShared) {
      copyOutRound(later, args, c, blocks.get(), firstSlot, 0);
      later.releaseSlotAt(firstSlot, later.nextPostValue());
      exchangeRounds(later, args, c, blocks.get(), 1, ceilDiv(globalMax, sub), false);
      return Status::ok();
    }
    // In place is refused for all-to-all-v (api/validate.cpp), so peers read send buffers
    // nobody writes during the call.
    later.releaseSlotAt(firstSlot, later.nextPostValue());
    for (int q = 0; q < c.nranks; ++q)
      if (q != c.rank)
        later.cmaRead(byteAt(args.recvbuff, blocks->recvOffset[q]), q,
                      c.segment->sendTable(q, seq)[c.rank].offset, blocks->recvBytes[q]);
    later.copy(byteAt(args.recvbuff, blocks->recvOffset[c.rank]),
               byteAt(args.sendbuff, blocks->sendOffset[c.rank]), blocks->recvBytes[c.rank]);
    later.waitAll(later.post());  // peers are done reading this rank's buffer
    return Status::ok();
  });
  return Status::ok();
}

}  // namespace trnccl
