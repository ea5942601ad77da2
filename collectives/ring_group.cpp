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

namespace {

struct PartsOf {
  const std::vector<Pieces>& parts;
  size_t esize;
  int n;
  const Pieces& part(int s) const { return parts[((s % n) + n) % n]; }
  const char* at(const void* buf, const Span& piece) const {
    return byteAt(buf, piece.begin * esize);
  }
  char* at(void* buf, const Span& piece) const { return byteAt(buf, piece.begin * esize); }
  size_t bytes(const Span& piece) const { return piece.count * esize; }
};

std::vector<Pieces> onePieceEach(const std::vector<Span>& parts) {
  std::vector<Pieces> result;
  result.reserve(parts.size());
  for (const Span& part : parts) result.push_back({part});
  return result;
}

}  // namespace

// At step t the rank at position p sends part p - t (its input at t = 0, afterwards what it
// reduced the step before) and receives part p - t - 1, reducing its own input into it as the
// fragments land.
void ringReduceScatterParts(ScheduleBuilder& b, const RingGroup& g, const CollArgs& a,
                            const void* in, void* out, const std::vector<Pieces>& parts,
                            int lastDivisor) {
  const int n = g.size(), p = g.pos;
  const PartsOf of{parts, elementSize(a), n};
  for (int t = 0; t < n - 1; ++t) {
    const int sendPart = p - t, recvPart = p - t - 1;
    ConcurrentSteps together(b);
    for (const Span& piece : of.part(sendPart))
      b.send(g.next(), t == 0 ? of.at(in, piece) : of.at(out, piece), of.bytes(piece));
    for (const Span& piece : of.part(recvPart)) {
      RecvAction reduce{RecvAction::Kind::kReduce, a.dtype, a.op, of.at(in, piece),
                        t == n - 2 ? lastDivisor : 0};
      b.recv(g.prev(), of.at(out, piece), of.bytes(piece), reduce);
    }
  }
}

void ringReduceScatterParts(ScheduleBuilder& b, const RingGroup& g, const CollArgs& a,
                            const void* in, void* out, const std::vector<Span>& parts,
                            int lastDivisor) {
  ringReduceScatterParts(b, g, a, in, out, onePieceEach(parts), lastDivisor);
}

void ringAllGatherParts(ScheduleBuilder& b, const RingGroup& g, const CollArgs& a, void* buf,
                        const std::vector<Pieces>& parts, int own) {
  const int n = g.size(), p = g.pos;
  const PartsOf of{parts, elementSize(a), n};
  for (int t = 0; t < n - 1; ++t) {
    ConcurrentSteps together(b);
    for (const Span& piece : of.part(p + own - t))
      b.send(g.next(), of.at(buf, piece), of.bytes(piece));
    for (const Span& piece : of.part(p + own - t - 1))
      b.recv(g.prev(), of.at(buf, piece), of.bytes(piece));
  }
}

void ringAllGatherParts(ScheduleBuilder& b, const RingGroup& g, const CollArgs& a, void* buf,
                        const std::vector<Span>& parts, int own) {
  ringAllGatherParts(b, g, a, buf, onePieceEach(parts), own);
}

}  // namespace trnccl
