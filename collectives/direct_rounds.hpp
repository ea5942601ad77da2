// The shared-window protocol every direct algorithm follows. Each round stages data in this
// rank's window slot, then runs phases separated by "post my counter, wait for everyone's".
// The last phase needs no post of its own: a peer's next post (whatever call it belongs to)
// proves that the peer finished reading this round's windows, so that post number releases
// the slot for reuse two rounds (or operations) later. The first wait of an operation also
// checks that every rank is making the same call.
#pragma once

#include <algorithm>

#include "collectives/algorithm.hpp"
#include "core/copy.hpp"
#include "transports/shm/shared_alloc.hpp"

namespace trnccl {

// Each phase is a callable (int slot, size_t round). Phases are template arguments, not
// std::function, so building a schedule does not allocate per phase. Rounds first..rounds-1
// (directRoundsFrom: a schedule that ran round 0 itself, as all-to-all-v does).
template <typename... Phases>
void directRoundsFrom(ScheduleBuilder& b, const CollArgs& a, size_t first, size_t rounds,
                      bool publish, const Phases&... phases) {
  if (publish) b.publishDescriptor(describe(a));
  constexpr size_t kPhases = sizeof...(Phases);
  for (size_t k = first; k < rounds; ++k) {
    int slot = b.acquireSlot();
    size_t index = 0;
    auto runPhase = [&](const auto& phase) {
      phase(slot, k);
      if (++index < kPhases) {
        b.waitAll(b.post());
        if (k == 0 && index == 1 && publish) b.checkDescriptors();
      } else {
        b.releaseSlotAt(slot, b.nextPostValue());
      }
    };
    (runPhase(phases), ...);
  }
}

// Two phases around one synchronisation, with work that needs nothing from the peers
// (`meanwhile`, e.g. copying this rank's own block out of its input) between this rank's post and
// its wait: it runs while the peers stage theirs instead of after they have.
template <typename Stage, typename Meanwhile, typename Finish>
void directRoundsOverlapped(ScheduleBuilder& b, const CollArgs& a, size_t first, size_t rounds,
                            bool publish, const Stage& stage, const Meanwhile& meanwhile,
                            const Finish& finish) {
  if (publish) b.publishDescriptor(describe(a));
  for (size_t k = first; k < rounds; ++k) {
    const int slot = b.acquireSlot();
    stage(slot, k);
    const uint64_t posted = b.post();
    meanwhile(slot, k);
    b.waitAll(posted);
    if (k == 0 && publish) b.checkDescriptors();
    finish(slot, k);
    b.releaseSlotAt(slot, b.nextPostValue());
  }
}

template <typename... Phases>
void directRounds(ScheduleBuilder& b, const CollArgs& a, size_t rounds, bool publish,
                  const Phases&... phases) {
  // An empty call still runs a round: it checks that peers agree.
  directRoundsFrom(b, a, 0, std::max<size_t>(rounds, 1), publish, phases...);
}

// The single-copy form (CMA): every rank publishes its send buffer's address with the call's
// descriptor and posts; once every rank has (which also checks that they make the same call),
// reads() copies what this rank needs straight out of the peers' buffers (ScheduleBuilder::
// cmaRead); a last post and wait keep every rank in the call until its peers have finished
// reading its buffer. Every rank takes this form or none: the block size and the node's
// CMA verdict (CommView::readsByCma) are the same everywhere, and nothing a single rank
// chooses (such as working in place) may change the form.
// `source` is what peers read (the send buffer, or a staged copy of it).
// Its first half: the descriptor with `source` (and `extra`, OpDescriptor::extra) published,
// every rank's post awaited and the descriptors checked.
inline void publishSingleCopySource(ScheduleBuilder& b, const CollArgs& a, const void* source,
                                    uint64_t extra = 0) {
  shm::OpDescriptor descriptor = describe(a);
  descriptor.sendAddress = reinterpret_cast<uint64_t>(source);
  shm::findSharedRegion(source, &descriptor.sendRegion);  // left "none" when it is not in one
  descriptor.extra = extra;
  b.publishDescriptor(descriptor);
  b.waitAll(b.post());
  b.checkDescriptors();
}

template <typename Reads>
void cmaExchange(ScheduleBuilder& b, const CollArgs& a, const void* source, const Reads& reads) {
  publishSingleCopySource(b, a, source);
  reads();
  b.waitAll(b.post());
}

inline size_t ceilDiv(size_t a, size_t b) {
  return (a + b - 1) / b;
}

// Bytes of a window slot given to each rank when the slot is split n ways (64-byte aligned).
inline size_t subBlockBytes(const CommView& c) {
  return std::max<size_t>(64, c.windowBytes / c.nranks / 64 * 64);
}

}  // namespace trnccl
