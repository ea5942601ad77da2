// Reduce over shared windows. Small messages: one-shot (every rank stages its input and posts;
// the root waits for all, then reduces the windows, reading its own input from its send buffer).
// Large messages: the two-shot reduction (split across all ranks), with only the root copying
// the reduced segments out.
#include "collectives/direct_rounds.hpp"
#include "collectives/two_shot.hpp"

namespace trnccl {

// Unlike all-reduce's one-shot (every rank reduces every input), here only the root reduces,
// so the one-shot does no redundant work: it is limited by the window and by how much the
// root alone should read (n inputs) before splitting the reduction across ranks pays for the
// extra synchronisation. 2 ranks, and 4 ranks on 2 cores, reduce_perf 32-256 KiB: one-shot
// took 0.5-0.7x the two-shot's time.
constexpr size_t kRootReadBudget = 1 << 20;

Status reduceDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t bytes = a.count * elementSize(a);
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
