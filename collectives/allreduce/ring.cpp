// Ring all-reduce: a reduce-scatter around the ring (n-1 steps, each rank sends one part to
// its successor while receiving and reducing another from its predecessor), then an all-gather
// of the reduced parts (n-1 steps). Works over any transport; the ring goes in the
// communicator's ring order (along NeuronLinks inside a node that has them). Each part's final
// value is computed by one rank and copied to the others, so results are bitwise identical on
// every rank; fp16/bf16 partial sums are rounded at each hop (unlike the direct algorithm).
#include "collectives/direct_rounds.hpp"
#include "collectives/ring_group.hpp"

namespace trnccl {

// Out of place, no up-front copy of the input: the first send and every reduction read their
// untouched parts straight from sendbuff, and every part of recvbuff is written by a reduction
// or by the all-gather (each rank's last reduced part is the one the all-gather does not bring
// back).
Status allReduceRing(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t esize = elementSize(a);
  if (c.nranks == 1) {
    b.copy(a.recvbuff, a.sendbuff, a.count * esize);
    return Status::ok();
  }
  const std::vector<Span> parts = splitParts(0, a.count, c.nranks);
  ringReduceScatterParts(b, c.ring, a, a.sendbuff, a.recvbuff, parts,
                         a.op == trncclAvg ? c.nranks : 0);
  ringAllGatherParts(b, c.ring, a, a.recvbuff, parts, 1);
  return Status::ok();
}

}  // namespace trnccl
