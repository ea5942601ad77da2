#include "collectives/ring_group.hpp"

#include <algorithm>
#include <span>

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

// Each ring step sends one part and receives another; a part is one or more pieces (runs of
// the buffer), each its own message. piecesOf(s): part s (mod n) as a span of pieces, so the
// one-span form needs no allocation per call.
template <typename PiecesOf>
void reduceScatterRing(ScheduleBuilder& b, const RingGroup& g, const CollArgs& a, const void* in,
                       void* out, int lastDivisor, PiecesOf piecesOf) {
  const int n = g.size(), p = g.pos;
  const size_t esize = elementSize(a);
  for (int t = 0; t < n - 1; ++t) {
    ConcurrentSteps together(b);
    for (const Span& piece : piecesOf(p - t))
      b.send(g.next(), byteAt(t == 0 ? in : out, piece.begin * esize), piece.count * esize);
    for (const Span& piece : piecesOf(p - t - 1)) {
      RecvAction reduce{RecvAction::Kind::kReduce, a.dtype, a.op, byteAt(in, piece.begin * esize),
                        t == n - 2 ? lastDivisor : 0};
      b.recv(g.prev(), byteAt(out, piece.begin * esize), piece.count * esize, reduce);
    }
  }
}

template <typename PiecesOf>
void allGatherRing(ScheduleBuilder& b, const RingGroup& g, const CollArgs& a, void* buf, int own,
                   PiecesOf piecesOf) {
  const int n = g.size(), p = g.pos;
  const size_t esize = elementSize(a);
  for (int t = 0; t < n - 1; ++t) {
    ConcurrentSteps together(b);
    for (const Span& piece : piecesOf(p + own - t))
      b.send(g.next(), byteAt(buf, piece.begin * esize), piece.count * esize);
    for (const Span& piece : piecesOf(p + own - t - 1))
      b.recv(g.prev(), byteAt(buf, piece.begin * esize), piece.count * esize);
  }
}

template <typename Part>
const Part& partAt(const std::vector<Part>& parts, int s) {
  const int n = static_cast<int>(parts.size());
  return parts[((s % n) + n) % n];
}

}  // namespace

// At step t the rank at position p sends part p - t (its input at t = 0, afterwards what it
// reduced the step before) and receives part p - t - 1, reducing its own input into it as the
// fragments land.
void ringReduceScatterParts(ScheduleBuilder& b, const RingGroup& g, const CollArgs& a,
                            const void* in, void* out, const std::vector<Span>& parts,
                            int lastDivisor) {
  reduceScatterRing(b, g, a, in, out, lastDivisor,
                    [&](int s) { return std::span<const Span>(&partAt(parts, s), 1); });
}

void ringReduceScatterParts(ScheduleBuilder& b, const RingGroup& g, const CollArgs& a,
                            const void* in, void* out, const std::vector<Pieces>& parts,
                            int lastDivisor) {
  reduceScatterRing(b, g, a, in, out, lastDivisor,
                    [&](int s) { return std::span<const Span>(partAt(parts, s)); });
}

void ringAllGatherParts(ScheduleBuilder& b, const RingGroup& g, const CollArgs& a, void* buf,
                        const std::vector<Span>& parts, int own) {
  allGatherRing(b, g, a, buf, own,
                [&](int s) { return std::span<const Span>(&partAt(parts, s), 1); });
}

void ringAllGatherParts(ScheduleBuilder& b, const RingGroup& g, const CollArgs& a, void* buf,
                        const std::vector<Pieces>& parts, int own) {
  allGatherRing(b, g, a, buf, own, [&](int s) { return std::span<const Span>(partAt(parts, s)); });
}

}  // namespace trnccl
