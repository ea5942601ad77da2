#include "collectives/levels.hpp"

#include <algorithm>

#include "collectives/direct_rounds.hpp"

namespace trnccl {

void allReduceOverLevels(ScheduleBuilder& b, const CollArgs& a, const void* in, void* out,
                         const std::vector<RingGroup>& levels, int nranks) {
  std::vector<const RingGroup*> used;
  for (const RingGroup& g : levels)
    if (g.size() > 1) used.push_back(&g);
  if (used.empty()) {
    b.copy(out, in, a.count * elementSize(a));
    return;
  }
  std::vector<std::vector<Span>> partsOf;
  Span range{0, a.count};
  const void* source = in;
  for (size_t i = 0; i < used.size(); ++i) {
    const RingGroup& g = *used[i];
    std::vector<Span> parts = splitParts(range.begin, range.count, g.size());
    const bool last = i + 1 == used.size();
    ringReduceScatterParts(b, g, a, source, out, parts, last && a.op == trncclAvg ? nranks : 0);
    range = parts[(g.pos + 1) % g.size()];
    partsOf.push_back(std::move(parts));
    source = out;
  }
  for (size_t i = used.size(); i-- > 0;) ringAllGatherParts(b, *used[i], a, out, partsOf[i], 1);
}

namespace {

// Reorders the steps built from firstStep on, lane by lane (lane l = steps [starts[l],
// starts[l+1])), so that lane l's group j runs together with lane l+1's group j - stagger.
// Lanes touch disjoint memory. Every rank builds the same lanes, so two ranks' messages to
// each other are started in the same order on both sides (lane order within a group).
void overlapLanes(Schedule& s, const std::vector<size_t>& starts, uint32_t stagger) {
  const size_t first = starts.front(), end = s.steps.size();
  const uint32_t base = first < end ? s.steps[first].group : s.groups;
  std::vector<std::pair<uint32_t, Step>> keyed;
  for (size_t lane = 0; lane + 1 < starts.size(); ++lane) {
    uint32_t local = 0;
    for (size_t i = starts[lane]; i < starts[lane + 1]; ++i) {
      if (i > starts[lane] && s.steps[i].group != s.steps[i - 1].group) ++local;
      keyed.emplace_back(static_cast<uint32_t>(lane) * stagger + local, s.steps[i]);
    }
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  uint32_t last = 0;
  for (size_t i = 0; i < keyed.size(); ++i) {
    s.steps[first + i] = keyed[i].second;
    s.steps[first + i].group = base + keyed[i].first;
    last = std::max(last, keyed[i].first);
  }
  if (!keyed.empty()) s.groups = base + last + 1;
}

// Blocks (one rank's share each) in grid order: coordinate 0 varies slowest, so at level i
// the part of coordinate value v, with the lower coordinates this rank's, is contiguous.
struct GridLayout {
  std::vector<size_t> span;  // blocks per step of each coordinate
  size_t mine = 0;           // this rank's grid index
  explicit GridLayout(const std::vector<RingGroup>& levels) : span(levels.size(), 1) {
    for (size_t i = levels.size(); i-- > 1;) span[i - 1] = span[i] * levels[i].size();
    for (size_t i = 0; i < levels.size(); ++i) mine += levels[i].pos * span[i];
  }
  // Level i's parts (elements, count per block), with levels below i at this rank's values.
  std::vector<Span> parts(const std::vector<RingGroup>& levels, size_t i, size_t count) const {
    size_t base = 0;
    for (size_t j = 0; j < i; ++j) base += levels[j].pos * span[j];
    std::vector<Span> result;
    for (int v = 0; v < levels[i].size(); ++v)
      result.push_back({(base + v * span[i]) * count, span[i] * count});
    return result;
  }
  // The same parts where their blocks lie in a buffer in rank order (gridRanks: the rank at
  // each grid index): one piece per run of consecutive ranks.
  std::vector<Pieces> partsInRankOrder(const std::vector<RingGroup>& levels, size_t i, size_t count,
                                       const std::vector<int>& gridRanks) const {
    size_t base = 0;
    for (size_t j = 0; j < i; ++j) base += levels[j].pos * span[j];
    std::vector<Pieces> result(levels[i].size());
    for (int v = 0; v < levels[i].size(); ++v) {
      for (size_t g = base + v * span[i]; g < base + (v + 1) * span[i]; ++g) {
        const size_t at = static_cast<size_t>(gridRanks[g]) * count;
        Pieces& pieces = result[v];
        if (!pieces.empty() && pieces.back().begin + pieces.back().count == at)
          pieces.back().count += count;
        else
          pieces.push_back({at, count});
      }
    }
    return result;
  }
};

}  // namespace

void allReduceOverLevelsPipelined(ScheduleBuilder& b, const CollArgs& a, const void* in, void* out,
                                  const std::vector<RingGroup>& levels, int nranks, int chunks) {
  chunks = static_cast<int>(std::max<size_t>(1, std::min<size_t>(chunks, a.count)));
  const RingGroup* firstLevel = nullptr;
  for (const RingGroup& g : levels)
    if (g.size() > 1 && !firstLevel) firstLevel = &g;
  if (chunks == 1 || !firstLevel) {
    allReduceOverLevels(b, a, in, out, levels, nranks);
    return;
  }
  const size_t esize = elementSize(a);
  std::vector<size_t> starts;
  for (const Span& slice : splitParts(0, a.count, chunks)) {
    starts.push_back(b.schedule().steps.size());
    CollArgs part = a;
    part.count = slice.count;
    part.sendbuff = byteAt(in, slice.begin * esize);
    part.recvbuff = byteAt(out, slice.begin * esize);
    allReduceOverLevels(b, part, part.sendbuff, part.recvbuff, levels, nranks);
  }
  starts.push_back(b.schedule().steps.size());
  overlapLanes(b.schedule(), starts, static_cast<uint32_t>(firstLevel->size() - 1));
}

void allGatherOverGrid(ScheduleBuilder& b, const CollArgs& a, const std::vector<RingGroup>& levels,
                       const std::vector<int>& gridRanks) {
  const size_t blockBytes = a.count * elementSize(a);
  const GridLayout grid(levels);
  const int myRank = gridRanks[grid.mine];
  if (!gridStages(blockBytes)) {
    b.copy(byteAt(a.recvbuff, myRank * blockBytes), a.sendbuff, blockBytes);
    for (size_t i = levels.size(); i-- > 0;)
      ringAllGatherParts(b, levels[i], a, a.recvbuff,
                         grid.partsInRankOrder(levels, i, a.count, gridRanks), 0);
    return;
  }
  char* gathered = b.scratch(gridRanks.size() * blockBytes);
  b.copy(gathered + grid.mine * blockBytes, a.sendbuff, blockBytes);
  for (size_t i = levels.size(); i-- > 0;)
    ringAllGatherParts(b, levels[i], a, gathered, grid.parts(levels, i, a.count), 0);
  for (size_t g = 0; g < gridRanks.size(); ++g)
    b.copy(byteAt(a.recvbuff, gridRanks[g] * blockBytes), gathered + g * blockBytes, blockBytes);
}

void reduceScatterOverGrid(ScheduleBuilder& b, const CollArgs& a,
                           const std::vector<RingGroup>& levels, const std::vector<int>& gridRanks,
                           int nranks) {
  const size_t blockBytes = a.count * elementSize(a);
  const GridLayout grid(levels);
  const int myRank = gridRanks[grid.mine];
  char* sums = b.scratch(gridRanks.size() * blockBytes);
  const bool staged = gridStages(blockBytes);
  if (staged)
    for (size_t g = 0; g < gridRanks.size(); ++g)
      b.copy(sums + g * blockBytes, byteAt(a.sendbuff, gridRanks[g] * blockBytes), blockBytes);
  size_t lastUsed = levels.size();
  for (size_t i = 0; i < levels.size(); ++i)
    if (levels[i].size() > 1) lastUsed = i;
  // Unstaged, the first level reads the input where it lies and the partial sums go to
  // scratch in rank order.
  const void* source = staged ? sums : a.sendbuff;
  for (size_t i = 0; i < levels.size(); ++i) {
    if (levels[i].size() < 2) continue;
    const int divisor = i == lastUsed && a.op == trncclAvg ? nranks : 0;
    // Rotated by one: position p ends with the part of coordinate value p, its own.
    if (staged)
      ringReduceScatterParts(b, levels[i], a, sums, sums,
                             rotated(grid.parts(levels, i, a.count), 1), divisor);
    else
      ringReduceScatterParts(b, levels[i], a, source, sums,
                             rotated(grid.partsInRankOrder(levels, i, a.count, gridRanks), 1),
                             divisor);
    source = sums;
  }
  b.copy(a.recvbuff, byteAt(source, (staged ? grid.mine : myRank) * blockBytes), blockBytes);
}

}  // namespace trnccl
