#include "collectives/planner.hpp"

#include <cctype>

namespace trnccl {
namespace {

std::optional<Algorithm> algorithmFromName(const std::string& name) {
  if (name == "ring" || name == "chain" || name == "pairwise") return Algorithm::kRing;
  if (name == "direct") return Algorithm::kDirect;
  return std::nullopt;
}

std::optional<CollKind> kindFromName(const std::string& name) {
  for (int k = 0; k < static_cast<int>(CollKind::kSendRecv); ++k) {
    std::string candidate = collName(static_cast<CollKind>(k));
    for (auto& ch : candidate) ch = static_cast<char>(std::tolower(ch));
    if (candidate == name) return static_cast<CollKind>(k);
  }
  return std::nullopt;
}

using BuildFn = Status (*)(ScheduleBuilder&, const CollArgs&, const CommView&);

BuildFn builderFor(CollKind kind, Algorithm algo) {
  bool ring = algo == Algorithm::kRing;
  switch (kind) {
    case CollKind::kAllReduce: return ring ? allReduceRing : allReduceDirect;
    case CollKind::kAllGather: return ring ? allGatherRing : allGatherDirect;
    case CollKind::kReduceScatter: return ring ? reduceScatterRing : reduceScatterDirect;
    case CollKind::kBroadcast: return ring ? broadcastChain : broadcastDirect;
    case CollKind::kReduce: return ring ? reduceChain : reduceDirect;
    case CollKind::kAllToAll:
    case CollKind::kAllToAllv: return ring ? allToAllPairwise : allToAllDirect;
    case CollKind::kBarrier: return ring ? barrierDissemination : barrierDirect;
    case CollKind::kSendRecv: return sendRecvP2p;
    default: return nullptr;
  }
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
                       "TRNCCL_ALGO='%s': unknown algorithm '%s' "
                       "(known: ring, direct)",
                       text.c_str(), algoName.c_str());
    if (exclude) {
      overrides.excluded[static_cast<int>(*algo)] = true;
      continue;
    }
    if (kindName.empty()) {
      for (auto& slot : overrides.forKind) slot = algo;
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
  }
  if (overrides.excluded[0] && overrides.excluded[1])
    return makeError(Code::kInvalidArgument, "TRNCCL_ALGO='%s' excludes every algorithm",
                     text.c_str());
  return overrides;
}

Result<Algorithm> Planner::choose(CollKind kind, size_t /*bytes*/) const {
  if (kind == CollKind::kSendRecv) return Algorithm::kRing;
  const auto& forced = overrides_.forKind[static_cast<int>(kind)];
  if (forced) {
    if (*forced == Algorithm::kDirect && !view_.allLocal)
      return makeError(Code::kInvalidUsage,
                       "TRNCCL_ALGO asks for the direct algorithm for "
                       "%s, but it needs every rank on one node; this communicator spans "
                       "several",
                       collName(kind));
    return *forced;
  }
  // Shared windows move each byte once in and once out; rings copy through fragments and
  // forward n-1 times. Whenever every rank shares the node, direct wins at every size here.
  bool directAllowed = view_.allLocal && !overrides_.excluded[static_cast<int>(Algorithm::kDirect)];
  return directAllowed ? Algorithm::kDirect : Algorithm::kRing;
}

Status Planner::build(ScheduleBuilder& b, const CollArgs& a, Algorithm algo) const {
  BuildFn fn = builderFor(a.kind, algo);
  if (!fn) return makeError(Code::kInternalError, "no algorithm for this call");
  b.schedule().dtype = a.dtype;
  b.schedule().op = a.op;
  return fn(b, a, view_);
}

std::string Planner::planTable() const {
  std::string table;
  for (int k = 0; k < static_cast<int>(CollKind::kSendRecv); ++k) {
    auto kind = static_cast<CollKind>(k);
    auto algo = choose(kind, 0);
    table += strformat("%s%s=%s", table.empty() ? "" : " ", collName(kind),
                       algo.isOk() ? algorithmName(algo.value()) : "invalid");
    if (kind == CollKind::kAllReduce && algo.isOk() && algo.value() == Algorithm::kDirect)
      table += strformat("(lines<=%zuB,one-shot<=%zuB,two-shot above)", view_.llMaxBytes,
                         view_.oneShotMaxBytes);
    if (kind == CollKind::kAllReduce && algo.isOk() && algo.value() == Algorithm::kRing)
      table += strformat("(recursive-doubling<=%zuB,ring above)", kRecursiveDoublingMaxBytes);
    if (kind == CollKind::kAllGather && algo.isOk() && algo.value() == Algorithm::kDirect)
      table += strformat("(lines<=%zuB per rank,windows above)", view_.llMaxBytes);
    if (kind == CollKind::kReduceScatter && algo.isOk() && algo.value() == Algorithm::kDirect)
      table += strformat("(lines<=%zuB input,windows above)", view_.llMaxBytes);
  }
  return table;
}

}  // namespace trnccl
