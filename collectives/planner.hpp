// The planner: picks, for each call, the algorithm with the least modeled time
// (cost_model.hpp) for the communicator's shape and the call's size, honouring TRNCCL_ALGO (or
// the config's algorithm string). Every decision the library makes about algorithms is here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "collectives/algorithm.hpp"
#include "collectives/cost_model.hpp"

namespace trnccl {

struct AlgoOverrides {
  std::optional<Algorithm> forKind[static_cast<int>(CollKind::kCount)];
  // Named for that collective ("allreduce:torus"), not by the global form ("torus"): a
  // collective-specific choice that cannot run is refused; the global one applies only to the
  // collectives that have that algorithm.
  bool named[static_cast<int>(CollKind::kCount)] = {};
  bool excluded[static_cast<int>(Algorithm::kCount)] = {};
};

// Grammar: an algorithm name (collectives/registry.cpp) for every collective that has it |
// "allreduce:rhd;allgather:bruck" | "^direct" (never direct). Collective names: allreduce,
// allgather, reducescatter, broadcast, reduce, alltoall, alltoallv, barrier.
Result<AlgoOverrides> parseAlgoOverrides(const std::string& text);

// One planned choice: an algorithm, the pipelined slices it cuts the call into (1 for the
// algorithms that do not; runsInSlices), and its modeled time for a call size.
struct Candidate {
  Algorithm algo;
  double us;
  int slices = 1;
};

// A run of call sizes (as nccl-tests counts them) with the same choice.
struct PlanRange {
  size_t fromBytes, toBytes;  // inclusive; the last range ends at Planner::kPlanMaxBytes
  Algorithm algo;
  int slices = 1;
};

// "hierarchical", or "hierarchical(8-slice)" for a choice cut into 8 slices (no spaces: the
// plan line is read word by word, bench/plot/planner_replay.py).
std::string choiceName(Algorithm algo, int slices);

class Planner {
 public:
  Planner(CommView view, AlgoOverrides overrides, CostParams costs = machineCosts());
  // bytes: count * element size as the call gives it (per rank for all-gather and
  // reduce-scatter, per peer for all-to-all; all-to-all-v has one choice for every size).
  Result<Algorithm> choose(CollKind kind, size_t bytes) const;
  // Builds the schedule for a call with the chosen algorithm (and, for an algorithm that runs
  // in slices, the planned count: slicesFor).
  Status build(ScheduleBuilder& b, const CollArgs& a, Algorithm algo) const;
  // The pipelined slices algo cuts a call of kind and `bytes` (as choose takes them) into:
  // TRNCCL_PIPELINE_CHUNKS when set, else the count with the least modeled time; 1 for
  // algorithms that do not run in slices.
  int slicesFor(CollKind kind, size_t bytes, Algorithm algo) const;
  // Every algorithm that can run kind here (not excluded, fits), fastest first, for a call
  // of callBytes (nccl-tests' size; see modeledUs).
  std::vector<Candidate> ranked(CollKind kind, size_t callBytes) const;
  // The planner's own choice by size, merged into ranges (TRNCCL_ALGO not applied).
  std::vector<PlanRange> ranges(CollKind kind) const;
  // "AllReduce=rd<=128K,hierarchical ..." for INFO at init, with why topology-shaped
  // algorithms do not fit when they do not.
  std::string planTable() const;
  // One line per collective and size range: the choice and the modeled times of every
  // candidate at the range's upper end (INFO at init, `trnccl-topo --plan --verbose`).
  std::vector<std::string> planDetails() const;
  const CostParams& costs() const { return costs_; }
  const PlanShape& shape() const { return shape_; }

  // Buckets: 0 bytes, then (2^(i-2), 2^(i-1)] up to 16 GiB; the last takes every larger call.
  static constexpr int kBuckets = 36;
  static constexpr size_t kPlanMaxBytes = SIZE_MAX;  // the last range's end
  // The size a range is shown and modeled at: its upper end; for the open last range 1 GiB,
  // or its first bucket's end when it starts past that.
  static size_t representative(const PlanRange& range);

 private:
  // Whether build() runs a call of kind (blocks of blockBytes) that the planner gave to algo as
  // allToAllAgreeingOnInPlace: the pairwise all-to-all (ring) on one node with blocks of
  // kInPlaceAgreementMinBlock and more, unless TRNCCL_ALGO forces ring or excludes direct. In
  // place, the pairwise form stages the whole input first, and the windows stage it a round at a
  // time; measured (us, 3 rounds, pairwise against windows, in place): 2 ranks 64 MiB 6583-6621
  // against 2089-2141; 4 ranks 16 MiB 3602-3666 against 2568-2622, 64 MiB 20046-20501 against
  // 11743-11761; 4 MiB 1094 against 1043. Out of place the pairwise form was as fast or faster (4
  // ranks 64 MiB 13272-14046 against 15347-16640), and that is the form every rank takes unless
  // one works in place. The agreement costs a descriptor exchange, well under 1% of a call this
  // large.
  bool agreesOnInPlace(CollKind kind, size_t blockBytes, Algorithm algo) const;
  static constexpr size_t kInPlaceAgreementMinBlock = size_t{4} << 20;
  // Whether algo exists for kind and fits this communicator; if not, why (for refusals).
  bool runs(CollKind kind, Algorithm algo, std::string* whyNot) const;
  size_t callBytes(CollKind kind, size_t bytes) const;
  // The one algorithm for every size of a collective whose ranks' sizes differ (all-to-all-v).
  Algorithm leastRegret(CollKind kind) const;
  // algo's modeled time for kind at callBytes, with its best slice count (see slicesFor).
  Candidate modeled(Algorithm algo, CollKind kind, size_t callBytes) const;
  // The planned slice count of algo for kind in a size bucket (slicesFor without the size).
  int slicesAt(CollKind kind, int bucket, Algorithm algo) const;

  CommView view_;
  AlgoOverrides overrides_;
  CostParams costs_;
  PlanShape shape_;
  bool hierarchicalFits_ = false;
  bool torusFits_ = false;
  // The cheapest algorithm per collective and size bucket, computed once at init: choose()
  // is on every call's path.
  Algorithm table_[static_cast<int>(CollKind::kCount)][kBuckets];
  // The planned slices of every algorithm that runs in slices, per size bucket of all-reduce
  // (whether or not it is the choice there: TRNCCL_ALGO may force it).
  uint8_t allReduceSlices_[static_cast<int>(Algorithm::kCount)][kBuckets] = {};
};

}  // namespace trnccl
