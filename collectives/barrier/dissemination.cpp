// Dissemination barrier: in round k every rank signals r + 2^k and waits for r - 2^k; after
// ceil(log2 n) rounds every rank has heard, transitively, from every other.
#include "collectives/algorithm.hpp"

namespace trnccl {

Status barrierDissemination(ScheduleBuilder& b, const CollArgs&, const CommView& c) {
  static const char token = 0;
  static char sink;
  for (int step = 1; step < c.nranks; step *= 2) {
    ConcurrentSteps together(b);
    b.send((c.rank + step) % c.nranks, &token, 0);
    b.recv((c.rank - step + c.nranks) % c.nranks, &sink, 0);
  }
  return Status::ok();
}

}  // namespace trnccl
