// The two-shot shared-window reduction used by all-reduce and reduce: stage a window-sized
// round, each rank reduces its segment of the round from every window (rank order, so results
// are bitwise identical), then the ranks that want the result copy the segments out.
#pragma once

#include "collectives/algorithm.hpp"

namespace trnccl {

// copyOutRank < 0: every rank copies the result out (all-reduce); else only that rank.
void twoShotDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c, int copyOutRank);

}  // namespace trnccl
