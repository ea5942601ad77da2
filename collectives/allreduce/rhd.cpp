// Rabenseifner's all-reduce: a reduce-scatter by recursive halving, then an all-gather by
// recursive doubling, over the largest power of two p2 of ranks. Each rank sends and receives
// about 2(p2-1)/p2 of the buffer, like the ring, but in 2 log2(p2) rounds instead of 2(n-1):
// between the ring (bandwidth, many rounds) and recursive doubling (few rounds, log2(n) whole
// buffers). With n not a power of two, the first 2r ranks (r = n - p2) pair up first: the even
// one hands its input to the odd one and gets the result back at the end, so those pairs move
// the whole buffer twice more. Ranks are numbered in the communicator's ring order, and the
// rounds with the largest messages pair ring neighbours (link neighbours inside a node). Each
// part's final value is computed on one rank and copied to the others: results are bitwise
// identical on every rank.
#include "collectives/direct_rounds.hpp"
#include "collectives/ring_group.hpp"

namespace trnccl {

Status allReduceRhd(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t esize = elementSize(a);
  const size_t bytes = a.count * esize;
  const RingGroup& g = c.ring;
  const int n = g.size(), me = g.pos;
  if (n == 1) {
    b.copy(a.recvbuff, a.sendbuff, bytes);
    return Status::ok();
  }
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int folded = n - p2;  // positions 0, 2, ..., 2*folded-2 sit the halving out
  const int avgDivisor = a.op == trncclAvg ? n : 0;

  if (me < 2 * folded && me % 2 == 0) {  // hands its input to me + 1, which returns the result
    b.send(g.at(me + 1), a.sendbuff, bytes);
    b.recv(g.at(me + 1), a.recvbuff, bytes);
    return Status::ok();
  }
  const void* partial = a.sendbuff;
  if (me < 2 * folded) {  // odd: fold in the even neighbour's input
    b.recv(g.at(me - 1), a.recvbuff, bytes,
           RecvAction{RecvAction::Kind::kReduce, a.dtype, a.op, a.sendbuff, 0});
    partial = a.recvbuff;
  }
  const int v = me < 2 * folded ? me / 2 : me - folded;  // index among the p2 taking part
  auto rankOf = [&](int index) { return g.at(index < folded ? 2 * index + 1 : index + folded); };
  const std::vector<Span> blocks = splitParts(0, a.count, p2);
  auto at = [&](auto* buf, int block) { return byteAt(buf, blocks[block].begin * esize); };
  auto span = [&](int first, int count) {
    return (first + count == p2 ? a.count : blocks[first + count].begin) - blocks[first].begin;
  };

  // Halving: this rank's blocks [lo, lo + width) shrink to the half its bit of `mask` names;
  // it sends the other half to the partner and reduces the partner's copy of its own half.
  // The nearest partner (mask 1) comes first, so the largest messages go between neighbours
  // and the rounds that cross nodes carry the smallest.
  int lo = 0, width = p2;
  for (int mask = 1; mask < p2; mask *= 2) {
    const int partner = rankOf(v ^ mask);
    const int half = width / 2;
    const int keep = (v & mask) ? lo + half : lo, give = (v & mask) ? lo : lo + half;
    ConcurrentSteps together(b);
    b.send(partner, at(partial, give), span(give, half) * esize);
    b.recv(partner, at(a.recvbuff, keep), span(keep, half) * esize,
           RecvAction{RecvAction::Kind::kReduce, a.dtype, a.op, at(partial, keep),
                      mask == p2 / 2 ? avgDivisor : 0});
    lo = keep;
    width = half;
    partial = a.recvbuff;
  }
  // Doubling, the halving's rounds in reverse: the partner holds the neighbouring run of
  // blocks of the same width.
  for (int mask = p2 / 2; mask >= 1; mask /= 2) {
    const int partner = rankOf(v ^ mask);
    const int theirs = (v & mask) ? lo - width : lo + width;
    ConcurrentSteps together(b);
    b.send(partner, at(a.recvbuff, lo), span(lo, width) * esize);
    b.recv(partner, at(a.recvbuff, theirs), span(theirs, width) * esize);
    lo = std::min(lo, theirs);
    width *= 2;
  }
  if (me < 2 * folded) b.send(g.at(me - 1), a.recvbuff, bytes);
  return Status::ok();
}

}  // namespace trnccl
