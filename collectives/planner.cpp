#include "collectives/planner.hpp"

#include <cctype>

#include "collectives/registry.hpp"
#include "collectives/shapes.hpp"

namespace trnccl {
namespace {

std::optional<CollKind> kindFromName(const std::string& name) {
  for (int k = 0; k < static_cast<int>(CollKind::kSendRecv); ++k) {
    std::string candidate = collName(static_cast<CollKind>(k));
    for (auto& ch : candidate) ch = static_cast<char>(std::tolower(ch));
    if (candidate == name) return static_cast<CollKind>(k);
  }
  return std::nullopt;
}

}  // namespace

Result<AlgoOverrides> parseAlgoOverrides(const std::string& text) {
  AlgoOverrides overrides;
  std::string lowered;
  for (char ch : text) lowered += static_cast<char>(std::tolower(ch));
  size_t start = 0;
  while (start < lowered.size()) {
    size_t end = lowered.find_first_of(";,", start);
    if (end == std::string::npos) end = lowered.size();
    std::string item = lowered.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    bool exclude = item[0] == '^';
    if (exclude) item.erase(0, 1);
    size_t colon = item.find(':');
    std::string kindName = colon == std::string::npos ? "" : item.substr(0, colon);
    std::string algoName = colon == std::string::npos ? item : item.substr(colon + 1);
    auto algo = algorithmFromName(algoName);
    if (!algo)
      return makeError(Code::kInvalidArgument,
                       "TRNCCL_ALGO='%s': unknown algorithm '%s' (known: %s)", text.c_str(),
                       algoName.c_str(), knownAlgorithmNames().c_str());
    if (exclude) {
      overrides.excluded[static_cast<int>(*algo)] = true;
      continue;
    }
    if (kindName.empty()) {
      for (int k = 0; k < static_cast<int>(CollKind::kCount); ++k)
        if (!overrides.named[k]) overrides.forKind[k] = algo;
      continue;
    }
    auto kind = kindFromName(kindName);
    if (!kind)
      return makeError(Code::kInvalidArgument,
                       "TRNCCL_ALGO='%s': unknown collective '%s' "
                       "(known: allreduce, allgather, reducescatter, broadcast, reduce, "
                       "alltoall, alltoallv, barrier)",
                       text.c_str(), kindName.c_str());
    overrides.forKind[static_cast<int>(*kind)] = algo;
    overrides.named[static_cast<int>(*kind)] = true;
  }
  if (overrides.excluded[static_cast<int>(Algorithm::kRing)] &&
      overrides.excluded[static_cast<int>(Algorithm::kDirect)])
    return makeError(Code::kInvalidArgument,
                     "TRNCCL_ALGO='%s' excludes both ring and direct; one of them runs every "
                     "collective",
                     text.c_str());
  return overrides;
}

Planner::Planner(CommView view, AlgoOverrides overrides)
    : view_(std::move(view)), overrides_(overrides) {
  hierarchicalFits_ = view_.shapes && view_.shapes->hierarchical.fits;
  torusFits_ = view_.shapes && view_.shapes->torus.fits;
}

bool Planner::runs(CollKind kind, Algorithm algo, std::string* whyNot) const {
  if (!builderFor(kind, algo)) {
    *whyNot = strformat("trnccl has no %s algorithm for %s", algorithmName(algo), collName(kind));
    return false;
  }
  switch (algo) {
    case Algorithm::kDirect:
      if (!view_.allLocal)
        *whyNot = "it needs every rank on one node; this communicator spans several";
      return view_.allLocal;
    case Algorithm::kHierarchical:
      if (!hierarchicalFits_)
        *whyNot = view_.shapes ? view_.shapes->hierarchical.whyNot : "no topology";
      return hierarchicalFits_;
    case Algorithm::kTorus:
      if (!torusFits_) *whyNot = view_.shapes ? view_.shapes->torus.whyNot : "no topology";
      return torusFits_;
    default: return true;
  }
}

// Without a cost model yet (issue 16), fixed preferences: windows inside a node without a
// device graph; with one, schedules whose messages follow the links (torus when the ranks
// fill the torus, else rings in link order); across nodes, hierarchical where it exists.
// Small all-reduces keep recursive doubling (the ring family's form up to its limit). bytes is
// per peer for all-to-all, and 0 for all-to-all-v (whose sizes differ between ranks, which
// must all choose alike): all-to-all-v across nodes is always node-aggregated.
Algorithm Planner::preferred(CollKind kind, size_t bytes) const {
  const bool small = kind == CollKind::kAllReduce && bytes <= kRecursiveDoublingMaxBytes;
  const bool allToAll = kind == CollKind::kAllToAll || kind == CollKind::kAllToAllv;
  std::string unused;
  auto usable = [&](Algorithm algo) {
    return !overrides_.excluded[static_cast<int>(algo)] && runs(kind, algo, &unused);
  };
  if (view_.allLocal && !view_.deviceLinks && usable(Algorithm::kDirect)) return Algorithm::kDirect;
  if (!small && view_.deviceLinks && usable(Algorithm::kTorus)) return Algorithm::kTorus;
  if (!small && !view_.allLocal && usable(Algorithm::kHierarchical) &&
      (!allToAll || bytes * view_.nranks <= kNodeAggregatedMaxBytes))
    return Algorithm::kHierarchical;
  if (small && usable(Algorithm::kRecursiveDoubling)) return Algorithm::kRecursiveDoubling;
  if (!overrides_.excluded[static_cast<int>(Algorithm::kRing)]) return Algorithm::kRing;
  return usable(Algorithm::kDirect) ? Algorithm::kDirect : Algorithm::kRing;
}

Result<Algorithm> Planner::choose(CollKind kind, size_t bytes) const {
  const int k = static_cast<int>(kind);
  if (kind == CollKind::kSendRecv || k < 0 || k >= static_cast<int>(CollKind::kCount))
    return Algorithm::kRing;
  const auto& forced = overrides_.forKind[k];
  if (forced) {
    std::string whyNot;
    if (runs(kind, *forced, &whyNot)) return *forced;
    // The global form names an algorithm for every collective; those without it keep the
    // planner's choice. A shape that does not fit is refused either way.
    const bool exists = builderFor(kind, *forced) != nullptr;
    if (overrides_.named[k] || exists)
      return makeError(Code::kInvalidUsage, "TRNCCL_ALGO asks for the %s algorithm for %s, but %s",
                       algorithmName(*forced), collName(kind), whyNot.c_str());
  }
  return preferred(kind, bytes);
}

Status Planner::build(ScheduleBuilder& b, const CollArgs& a, Algorithm algo) const {
  BuildFn fn = builderFor(a.kind, algo);
  if (!fn)
    return makeError(Code::kInternalError, "no %s algorithm for this call", algorithmName(algo));
  b.schedule().dtype = a.dtype;
  b.schedule().op = a.op;
  return fn(b, a, view_);
}

std::string Planner::planTable() const {
  std::string table;
  for (int k = 0; k < static_cast<int>(CollKind::kSendRecv); ++k) {
    auto kind = static_cast<CollKind>(k);
    // The sizes where the preferences change: all-reduce at the recursive-doubling limit,
    // all-to-all at kNodeAggregatedMaxBytes per rank (bytes here are per peer).
    const bool allToAll = kind == CollKind::kAllToAll;
    const size_t limit =
        allToAll ? kNodeAggregatedMaxBytes / std::max(1, view_.nranks) : kRecursiveDoublingMaxBytes;
    auto small = choose(kind, 0);
    auto large = choose(kind, kind == CollKind::kAllToAllv ? 0 : limit + 1);
    if (!table.empty()) table += " ";
    table += strformat("%s=", collName(kind));
    if (!small.isOk() || !large.isOk()) {
      table += "refused(" + (small.isOk() ? large : small).status().message() + ")";
      continue;
    }
    if (small.value() != large.value())
      table += strformat("%s<=%zuB%s,%s above", algorithmName(small.value()),
                         allToAll ? kNodeAggregatedMaxBytes : limit, allToAll ? " per rank" : "",
                         algorithmName(large.value()));
    else
      table += algorithmName(small.value());
    if (kind == CollKind::kAllReduce && small.value() == Algorithm::kDirect)
      table += strformat("(lines<=%zuB,one-shot<=%zuB,two-shot above)", view_.llMaxBytes,
                         view_.oneShotMaxBytes);
  }
  if (view_.shapes) {
    const Shapes& s = *view_.shapes;
    table += s.hierarchical.fits
                 ? strformat("; hierarchical: %d position(s) per node%s", s.hierarchical.owners,
                             s.hierarchical.uniform ? "" : " (uneven nodes: the rest fold in)")
                 : "; hierarchical does not fit: " + s.hierarchical.whyNot;
    table +=
        s.torus.fits ? "; torus " + s.torus.describe : "; torus does not fit: " + s.torus.whyNot;
  }
  return table;
}

}  // namespace trnccl
