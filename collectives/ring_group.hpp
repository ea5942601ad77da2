// Rings over a group of ranks in a chosen order: the whole communicator in link order, the
// ranks of one node, the ranks holding the same position on every node, one torus dimension.
// The ring algorithms and the topology-shaped ones (hierarchical, torus) are built from the two
// phases here, so a phase means the same schedule wherever it runs.
#pragma once

#include <vector>

#include "collectives/algorithm.hpp"

namespace trnccl {

// A contiguous run of elements of a buffer.
struct Span {
  size_t begin = 0, count = 0;
};

// A part made of several runs of the buffer: a grid's blocks that do not lie side by side in
// rank order (collectives/levels.cpp). Each run is its own message.
using Pieces = std::vector<Span>;

// n nearly equal parts of [begin, begin + count).
std::vector<Span> splitParts(size_t begin, size_t count, int n);
// parts rotated so that entry j is parts[(j - by) mod n]: ringReduceScatterParts leaves
// position p with entry p + 1, so rotated(parts, 1) leaves it with parts[p].
template <typename Part>
std::vector<Part> rotated(const std::vector<Part>& parts, int by) {
  const int n = static_cast<int>(parts.size());
  std::vector<Part> result(n);
  for (int j = 0; j < n; ++j) result[j] = parts[(((j - by) % n) + n) % n];
  return result;
}

// Ring reduce-scatter over parts (one per group member): after it, the rank at position p
// holds in `out` the group's reduction of parts[(p + 1) % n], at that part's offset. `in` is
// read (each part before it is overwritten, so in == out works); other parts of `out` are
// scratch for partial sums. lastDivisor: avgDivisor of the final reduction.
void ringReduceScatterParts(ScheduleBuilder& b, const RingGroup& g, const CollArgs& a,
                            const void* in, void* out, const std::vector<Span>& parts,
                            int lastDivisor);
void ringReduceScatterParts(ScheduleBuilder& b, const RingGroup& g, const CollArgs& a,
                            const void* in, void* out, const std::vector<Pieces>& parts,
                            int lastDivisor);
// Ring all-gather: the rank at position p holds parts[(p + own) % n] in buf (own = 1 is what
// ringReduceScatterParts leaves, own = 0 a plain all-gather); afterwards every rank holds
// every part.
void ringAllGatherParts(ScheduleBuilder& b, const RingGroup& g, const CollArgs& a, void* buf,
                        const std::vector<Span>& parts, int own);
void ringAllGatherParts(ScheduleBuilder& b, const RingGroup& g, const CollArgs& a, void* buf,
                        const std::vector<Pieces>& parts, int own);

// Pipelined chain broadcast of buf along the group from the rank at rootPos (which already
// holds the data), in chunk-sized pieces: a rank forwards piece k while receiving piece k+1.
void chainBroadcast(ScheduleBuilder& b, const RingGroup& g, int rootPos, void* buf, size_t bytes,
                    size_t chunk);

}  // namespace trnccl
