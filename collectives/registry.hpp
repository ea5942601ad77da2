// Every algorithm trnccl has, in one table: its TRNCCL_ALGO name and aliases, a one-line
// description, and the schedule builder for each collective it implements. The planner chooses
// among these; TRNCCL_ALGO names them; `trnccl-topo --plan` and the docs list them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/algorithm.hpp"

namespace trnccl {

struct AlgorithmInfo {
  Algorithm algo;
  const char* name;     // as TRNCCL_ALGO spells it
  const char* aliases;  // other accepted spellings, comma-separated ("" if none)
  const char* summary;  // one line: the shape and when it pays
};

const std::vector<AlgorithmInfo>& algorithms();
const char* algorithmName(Algorithm algo);
std::optional<Algorithm> algorithmFromName(std::string_view name);
// "ring, direct, hierarchical, ..." for messages that list what TRNCCL_ALGO accepts.
std::string knownAlgorithmNames();
// The builder of algo for kind, or nullptr when algo has no schedule for that collective.
BuildFn builderFor(CollKind kind, Algorithm algo);

}  // namespace trnccl
