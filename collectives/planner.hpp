// The planner: picks the algorithm for each call from the communicator's shape and the
// message size, honouring TRNCCL_ALGO (or the config's algorithm string). Every decision the
// library makes about algorithms is in planner.cpp.
#pragma once

#include <optional>
#include <string>

#include "collectives/algorithm.hpp"

namespace trnccl {

struct AlgoOverrides {
  std::optional<Algorithm> forKind[static_cast<int>(CollKind::kCount)];
  bool excluded[2] = {false, false};  // indexed by Algorithm
};

// Grammar: "ring" | "direct" | "allreduce:ring;allgather:direct" | "^direct" (never direct).
// Collective names: allreduce, allgather, reducescatter, broadcast, reduce, alltoall,
// alltoallv, barrier.
Result<AlgoOverrides> parseAlgoOverrides(const std::string& text);

class Planner {
 public:
  Planner(CommView view, AlgoOverrides overrides) : view_(view), overrides_(overrides) {}
  Result<Algorithm> choose(CollKind kind, size_t bytes) const;
  // Builds the schedule for a call with the chosen algorithm.
  Status build(ScheduleBuilder& b, const CollArgs& a, Algorithm algo) const;
  // "AllReduce: <=16K direct(one-shot), >16K direct(two-shot)" ... for INFO at init.
  std::string planTable() const;

 private:
  CommView view_;
  AlgoOverrides overrides_;
};

}  // namespace trnccl
