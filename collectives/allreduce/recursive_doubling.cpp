// Recursive doubling all-reduce, the ring family's form for small messages: log2(p) rounds
// instead of the ring's 2(p-1), each exchanging the whole buffer with the rank whose number
// differs in one bit. Over the network a small call costs its rounds, not its bytes. With p
// not a power of two, the first 2r ranks (r = p minus the largest power of two below it) pair
// up: the even one folds its input into the odd one first and gets the result back at the end.
// Every reduction puts the lower ranks' partial first, so partners compute the same
// expression and results are bitwise identical on every rank (NaNs and rounding included).
#include "collectives/direct_rounds.hpp"

namespace trnccl {

Status allReduceRecursiveDoubling(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t bytes = a.count * elementSize(a);
  const int n = c.nranks, r = c.rank;
  if (n == 1) {
    b.copy(a.recvbuff, a.sendbuff, bytes);
    return Status::ok();
  }
  int pof2 = 1;
  while (pof2 * 2 <= n) pof2 *= 2;
  const int folded = n - pof2;  // ranks 0, 2, ..., 2*folded-2 sit the doubling out
  char* incoming = b.scratch(bytes);
  const int avgDivisor = a.op == trncclAvg ? n : 0;
  auto lowerFirst = [](bool mineIsLower, const void* mine, const void* theirs) {
    return [=](int q) { return (q == 0) == mineIsLower ? mine : theirs; };
  };

  if (r < 2 * folded && r % 2 == 0) {  // folds into r + 1, which returns the result
    b.send(r + 1, a.sendbuff, bytes);
    b.recv(r + 1, a.recvbuff, bytes);
    return Status::ok();
  }
  const void* partial = a.sendbuff;
  if (r < 2 * folded) {  // odd: fold in the even neighbour's input (its rank is lower)
    b.recv(r - 1, incoming, bytes);
    b.reduce(a.recvbuff, 2, lowerFirst(false, a.sendbuff, incoming), a.count, 0);
    partial = a.recvbuff;
  }
  const int me = r < 2 * folded ? r / 2 : r - folded;
  auto rankOf = [&](int virtualRank) {
    return virtualRank < folded ? 2 * virtualRank + 1 : virtualRank + folded;
  };
  for (int mask = 1; mask < pof2; mask <<= 1) {
    const int partnerVirtual = me ^ mask;
    const int partner = rankOf(partnerVirtual);
    {
      ConcurrentSteps together(b);
      b.send(partner, partial, bytes);
      b.recv(partner, incoming, bytes);
    }
    // After the exchange: the send has completed, so the partial may be overwritten in place.
    const bool last = mask * 2 == pof2;
    b.reduce(a.recvbuff, 2, lowerFirst(me < partnerVirtual, partial, incoming), a.count,
             last ? avgDivisor : 0);
    partial = a.recvbuff;
  }
  if (r < 2 * folded) b.send(r - 1, a.recvbuff, bytes);
  return Status::ok();
}

}  // namespace trnccl
