#include "collectives/ring_group.hpp"

#include <algorithm>

#include "collectives/direct_rounds.hpp"

namespace trnccl {

int RingGroup::positionOf(int rank) const {
  return static_cast<int>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
}

RingGroup RingGroup::of(std::vector<int> order, int rank) {
  RingGroup g;
  g.ranks = std::move(order);
  g.pos = g.positionOf(rank);
  return g;
}

std::vector<Span> splitParts(size_t begin, size_t count, int n) {
  std::vector<Span> parts(n);
  for (int i = 0; i < n; ++i)
    parts[i] = {begin + partBegin(count, n, i),
                partBegin(count, n, i + 1) - partBegin(count, n, i)};
  return parts;
}

std::vector<Span> rotated(const std::vector<Span>& parts, int by) {
  const int n = static_cast<int>(parts.size());
  std::vector<Span> result(n);
  for (int j = 0; j < n; ++j) result[j] = parts[(((j - by) % n) + n) % n];
  return result;
}

namespace {

struct PartsOf {
  const std::vector<Span>& parts;
  size_t esize;
  int n;
  const Span& part(int s) const { return parts[((s % n) + n) % n]; }
  const char* at(const void* buf, int s) const { return byteAt(buf, part(s).begin * esize); }
  char* at(void* buf, int s) const { return byteAt(buf, part(s).begin * esize); }
  size_t bytes(int s) const { return part(s).count * esize; }
};

}  // namespace

// At step t the rank at position p sends part p - t (its input at t = 0, afterwards what it
// reduced the step before) and receives part p - t - 1, reducing its own input into it as the
// fragments land.
void ringReduceScatterParts(ScheduleBuilder& b, const RingGroup& g, const CollArgs& a,
                            const void* in, void* out, const std::vector<Span>& parts,
                            int lastDivisor) {
  const int n = g.size(), p = g.pos;
  const PartsOf of{parts, elementSize(a), n};
  for (int t = 0; t < n - 1; ++t) {
    const int sendPart = p - t, recvPart = p - t - 1;
    ConcurrentSteps together(b);
    b.send(g.next(), t == 0 ? of.at(in, sendPart) : of.at(out, sendPart), of.bytes(sendPart));
    RecvAction reduce{RecvAction::Kind::kReduce, a.dtype, a.op, of.at(in, recvPart),
                      t == n - 2 ? lastDivisor : 0};
    b.recv(g.prev(), of.at(out, recvPart), of.bytes(recvPart), reduce);
  }
}

void ringAllGatherParts(ScheduleBuilder& b, const RingGroup& g, const CollArgs& a, void* buf,
                        const std::vector<Span>& parts, int own) {
  const int n = g.size(), p = g.pos;
  const PartsOf of{parts, elementSize(a), n};
  for (int t = 0; t < n - 1; ++t) {
    ConcurrentSteps together(b);
    b.send(g.next(), of.at(buf, p + own - t), of.bytes(p + own - t));
    b.recv(g.prev(), of.at(buf, p + own - t - 1), of.bytes(p + own - t - 1));
  }
}

}  // namespace trnccl
