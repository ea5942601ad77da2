// Collectives over a grid of rings (levels): the hierarchical algorithms (level 0 = the ranks
// of a node along its links, level 1 = the same position on every node) and the torus ones
// (one level per torus dimension, then one across nodes). Level i's group holds the ranks that
// differ from this one only in coordinate i, ordered by it, so every member of a group holds
// the same range when the group starts. Each element's final value is reduced by one rank and
// copied to the others: results are bitwise identical on every rank.
#pragma once

#include <vector>

#include "collectives/ring_group.hpp"

namespace trnccl {

// Reduce-scatter through the levels in order (the range shrinks by each level's size), then
// all-gather back: bytes per level shrink geometrically, so the outer (slow) levels carry only
// their share. in == out works. nranks: the avg divisor.
void allReduceOverLevels(ScheduleBuilder& b, const CollArgs& a, const void* in, void* out,
                         const std::vector<RingGroup>& levels, int nranks);
// allReduceOverLevels on `chunks` consecutive slices of the buffer, software-pipelined: slice
// i+1's first level (inside the node) runs together with slice i's next level (across nodes),
// and so on, so that the node's links and the network work at the same time.
void allReduceOverLevelsPipelined(ScheduleBuilder& b, const CollArgs& a, const void* in, void* out,
                                  const std::vector<RingGroup>& levels, int nranks, int chunks);
// Whether the grid collectives below stage every block through scratch in grid order (one
// message per part, two more copies of the buffer) rather than send each part's blocks where
// they lie in rank order (one message per run of consecutive ranks). Staging pays only where
// a block copies in less time than a message's overhead; the cost model reads it too.
constexpr size_t kGridUnstagedMinBlockBytes = size_t{64} << 10;
inline bool gridStages(size_t blockBytes) {
  return blockBytes < kGridUnstagedMinBlockBytes;
}

// All-gather of a.count elements per rank: outer levels first (small blocks), then inner.
// gridRanks: the rank at each grid index (coordinate 0 varies slowest).
void allGatherOverGrid(ScheduleBuilder& b, const CollArgs& a, const std::vector<RingGroup>& levels,
                       const std::vector<int>& gridRanks);
// Reduce-scatter of a.count elements per rank: inner levels first, then outer.
void reduceScatterOverGrid(ScheduleBuilder& b, const CollArgs& a,
                           const std::vector<RingGroup>& levels, const std::vector<int>& gridRanks,
                           int nranks);

}  // namespace trnccl
