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
  // Named for that collective ("allreduce:torus"), not by the global form ("torus"): a
  // collective-specific choice that cannot run is refused; the global one applies only to the
  // collectives that have that algorithm.
  bool named[static_cast<int>(CollKind::kCount)] = {};
  bool excluded[static_cast<int>(Algorithm::kCount)] = {};
};

// Grammar: "ring" | "direct" | "hierarchical" (or "hier") | "torus" |
// "allreduce:ring;allgather:direct" | "^direct" (never direct). Collective names: allreduce,
// allgather, reducescatter, broadcast, reduce, alltoall, alltoallv, barrier.
Result<AlgoOverrides> parseAlgoOverrides(const std::string& text);

class Planner {
 public:
  Planner(CommView view, AlgoOverrides overrides);
  Result<Algorithm> choose(CollKind kind, size_t bytes) const;
  // Builds the schedule for a call with the chosen algorithm.
  Status build(ScheduleBuilder& b, const CollArgs& a, Algorithm algo) const;
  // "AllReduce=direct(...) ..." for INFO at init, with why topology-shaped algorithms do not
  // fit when they do not.
  std::string planTable() const;

 private:
  // Whether algo exists for kind and fits this communicator; if not, why (for refusals).
  bool runs(CollKind kind, Algorithm algo, std::string* whyNot) const;
  Algorithm preferred(CollKind kind, size_t bytes) const;

  CommView view_;
  AlgoOverrides overrides_;
  bool hierarchicalFits_ = false;
  bool torusFits_ = false;
};

}  // namespace trnccl
