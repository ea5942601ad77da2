#include "collectives/planner.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

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

namespace {

int bucketOf(size_t bytes) {
  if (bytes == 0) return 0;
  int bucket = 1;
  while (bucket < Planner::kBuckets - 1 && (size_t{1} << (bucket - 1)) < bytes) ++bucket;
  return bucket;
}
// The size a bucket is planned at: its upper end, so that limits at powers of two (the
// direct protocols' switch points) hold exactly.
size_t bucketBytes(int bucket) {
  return bucket == 0 ? 0 : size_t{1} << (bucket - 1);
}

}  // namespace

std::string choiceName(Algorithm algo, int slices) {
  return slices > 1 ? strformat("%s(%d-slice)", algorithmName(algo), slices)
                    : std::string(algorithmName(algo));
}

Planner::Planner(CommView view, AlgoOverrides overrides, CostParams costs)
    : view_(std::move(view)), overrides_(overrides), costs_(std::move(costs)) {
  hierarchicalFits_ = view_.shapes && view_.shapes->hierarchical.fits;
  torusFits_ = view_.shapes && view_.shapes->torus.fits;
  shape_ = planShapeOf(view_);
  for (int k = 0; k < static_cast<int>(CollKind::kCount); ++k) {
    const auto kind = static_cast<CollKind>(k);
    if (kind == CollKind::kAllToAllv) {
      std::fill(std::begin(table_[k]), std::end(table_[k]), leastRegret(kind));
      continue;
    }
    for (int bucket = 0; bucket < kBuckets; ++bucket) {
      // Empty calls go as the smallest ones do.
      const size_t planned = bucket == 0 ? 1 : bucketBytes(bucket);
      const auto options = ranked(kind, planned);
      // Nothing modeled (send/receive; everything excluded): the ring family runs anything.
      table_[k][bucket] = options.empty() ? Algorithm::kRing : options.front().algo;
    }
  }
  std::string unused;
  for (const auto& info : algorithms()) {
    if (!runsInSlices(info.algo, CollKind::kAllReduce) ||
        !runs(CollKind::kAllReduce, info.algo, &unused))
      continue;
    for (int bucket = 0; bucket < kBuckets; ++bucket)
      allReduceSlices_[static_cast<int>(info.algo)][bucket] = static_cast<uint8_t>(
          modeled(info.algo, CollKind::kAllReduce, bucket == 0 ? 1 : bucketBytes(bucket)).slices);
  }
}

// Slices trade overlap for rounds: each adds every level's per-message latency and step once
// more, and slice_us, and the model says where that stops paying. It replaced a fixed rule (one
// slice per MiB, at most 32); docs/PLANNER.md has both against measured counts at 1-64 MiB.
Candidate Planner::modeled(Algorithm algo, CollKind kind, size_t callBytes) const {
  if (!runsInSlices(algo, kind)) return {algo, modeledUs(algo, kind, callBytes, shape_, costs_)};
  if (view_.pipelineChunks > 0)
    return {algo, modeledUs(algo, kind, callBytes, shape_, costs_, view_.pipelineChunks),
            view_.pipelineChunks};
  Candidate best{algo, modeledUs(algo, kind, callBytes, shape_, costs_, 1), 1};
  for (int slices = 2; slices <= kMaxPipelineSlices && static_cast<size_t>(slices) <= callBytes;
       slices *= 2) {
    const double us = modeledUs(algo, kind, callBytes, shape_, costs_, slices);
    if (us < best.us) best = {algo, us, slices};
  }
  return best;
}

// The table holds modeled()'s counts, TRNCCL_PIPELINE_CHUNKS included; 0 (never planned: the
// algorithm does not run here) reads as 1.
int Planner::slicesAt(CollKind kind, int bucket, Algorithm algo) const {
  if (!runsInSlices(algo, kind)) return 1;
  return std::max<int>(1, allReduceSlices_[static_cast<int>(algo)][bucket]);
}

int Planner::slicesFor(CollKind kind, size_t bytes, Algorithm algo) const {
  // The uneven hierarchical reduce-scatter runs the hierarchical all-reduce of its whole input.
  if (kind == CollKind::kReduceScatter && algo == Algorithm::kHierarchical)
    kind = CollKind::kAllReduce, bytes = callBytes(CollKind::kReduceScatter, bytes);
  return slicesAt(kind, bucketOf(bytes), algo);
}

// All-to-all-v's sizes differ between ranks, so a rank cannot plan by size without asking the
// others first, and every rank must choose alike: one algorithm for every call, the one whose
// modeled time is the least worse than the best at its worst size (1 B to the last bucket).
// Planned at 0 bytes, as it once was, it took the node-aggregated form on 2 emulated nodes x 2
// ranks, which was 0.48-0.60x Open MPI's time at 1-16 MiB where the pairwise ring was
// 1.07-1.34x (docs/PLANNER.md).
Algorithm Planner::leastRegret(CollKind kind) const {
  std::vector<double> worst(static_cast<int>(Algorithm::kCount), 1.0);
  bool any = false;
  for (int bucket = 1; bucket < kBuckets; ++bucket) {
    const auto options = ranked(kind, bucketBytes(bucket));
    if (options.empty()) continue;
    any = true;
    std::vector<bool> modeled(worst.size(), false);
    for (const Candidate& c : options) {
      const auto a = static_cast<size_t>(c.algo);
      modeled[a] = true;
      worst[a] = std::max(worst[a], c.us / std::max(options.front().us, 1e-9));
    }
    // An algorithm not modeled at some size cannot be chosen for every size.
    for (size_t a = 0; a < worst.size(); ++a)
      if (!modeled[a]) worst[a] = std::numeric_limits<double>::infinity();
  }
  if (!any) return Algorithm::kRing;
  Algorithm best = Algorithm::kRing;
  double bestWorst = std::numeric_limits<double>::infinity();
  for (const auto& info : algorithms()) {  // registry order breaks ties
    const double w = worst[static_cast<size_t>(info.algo)];
    if (w < bestWorst) {
      best = info.algo;
      bestWorst = w;
    }
  }
  return best;
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

size_t Planner::callBytes(CollKind kind, size_t bytes) const {
  const bool perRank = kind == CollKind::kAllGather || kind == CollKind::kReduceScatter ||
                       kind == CollKind::kAllToAll;
  return perRank ? bytes * static_cast<size_t>(view_.nranks) : bytes;
}

std::vector<Candidate> Planner::ranked(CollKind kind, size_t callBytes) const {
  std::vector<Candidate> options;
  std::string unused;
  for (const auto& info : algorithms()) {
    if (overrides_.excluded[static_cast<int>(info.algo)] || !runs(kind, info.algo, &unused))
      continue;
    const Candidate candidate = modeled(info.algo, kind, callBytes);
    if (std::isfinite(candidate.us)) options.push_back(candidate);
  }
  // Stable: on a tie the registry's order decides (the simpler algorithm first).
  std::stable_sort(options.begin(), options.end(),
                   [](const Candidate& x, const Candidate& y) { return x.us < y.us; });
  return options;
}

size_t Planner::representative(const PlanRange& range) {
  if (range.toBytes != kPlanMaxBytes) return range.toBytes;
  size_t at = size_t{1} << 30;
  while (at < range.fromBytes) at *= 2;  // the first bucket end of an open range past 1 GiB
  return at;
}

std::vector<PlanRange> Planner::ranges(CollKind kind) const {
  std::vector<PlanRange> result;
  const int k = static_cast<int>(kind);
  for (int bucket = 0; bucket < kBuckets; ++bucket) {
    const Algorithm algo = table_[k][bucket];
    const int slices = slicesAt(kind, bucket, algo);
    const size_t from = bucket == 0 ? 0 : bucketBytes(bucket - 1) + 1;
    const size_t to = bucket == kBuckets - 1 ? kPlanMaxBytes : bucketBytes(bucket);
    if (!result.empty() && result.back().algo == algo && result.back().slices == slices)
      result.back().toBytes = to;
    else
      result.push_back({from, to, algo, slices});
  }
  return result;
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
  return table_[k][bucketOf(callBytes(kind, bytes))];
}

Status Planner::build(ScheduleBuilder& b, const CollArgs& a, Algorithm algo) const {
  BuildFn fn = builderFor(a.kind, algo);
  if (!fn)
    return makeError(Code::kInternalError, "no %s algorithm for this call", algorithmName(algo));
  b.schedule().dtype = a.dtype;
  b.schedule().op = a.op;
  // An all-gather reads only its input (and, in place, its own block before any peer's block
  // lands): measured, 2 ranks, 16-64 MiB, its copies streamed 1.3-2x faster in and out of place,
  // where the same rule for the two-shot all-reduce went bimodal (docs/PERFORMANCE.md).
  b.schedule().streamUnlessReadBack = a.kind == CollKind::kAllGather;
  b.setPipelineSlices(slicesFor(a.kind, a.count * elementSize(a), algo));
  if (agreesOnInPlace(a.kind, a.count * elementSize(a), algo)) {
    allToAllAgreeingOnInPlace(b, a, view_, fn);
    return Status::ok();
  }
  return fn(b, a, view_);
}

bool Planner::agreesOnInPlace(CollKind kind, size_t blockBytes, Algorithm algo) const {
  const auto& forced = overrides_.forKind[static_cast<int>(CollKind::kAllToAll)];
  return kind == CollKind::kAllToAll && algo == Algorithm::kRing && forced != algo &&
         view_.allLocal && view_.nranks > 1 && shape_.intra != topology::LinkClass::kNeuronLink &&
         !overrides_.excluded[static_cast<int>(Algorithm::kDirect)] &&
         blockBytes >= kInPlaceAgreementMinBlock;
}

std::string Planner::planTable() const {
  std::string table;
  for (int k = 0; k < static_cast<int>(CollKind::kSendRecv); ++k) {
    const auto kind = static_cast<CollKind>(k);
    if (!table.empty()) table += " ";
    table += strformat("%s=", collName(kind));
    const auto& forced = overrides_.forKind[k];
    if (forced) {
      auto chosen = choose(kind, 0);
      if (!chosen.isOk()) {
        table += "refused(" + chosen.status().message() + ")";
        continue;
      }
      if (chosen.value() == *forced) {
        table += strformat("%s(TRNCCL_ALGO)", algorithmName(*forced));
        continue;
      }
    }
    const auto plan = ranges(kind);
    for (size_t i = 0; i < plan.size(); ++i) {
      table += choiceName(plan[i].algo, plan[i].slices);
      if (i + 1 < plan.size()) table += "<=" + sizeText(plan[i].toBytes) + ",";
    }
  }
  const auto toAll = ranges(CollKind::kAllToAll);
  if (!toAll.empty() && agreesOnInPlace(CollKind::kAllToAll, kPlanMaxBytes, toAll.back().algo))
    table += strformat(
        "; AllToAll ring with blocks of %s and more: direct when a rank works "
        "in place",
        sizeText(kInPlaceAgreementMinBlock).c_str());
  if (view_.shapes) {
    const Shapes& s = *view_.shapes;
    table += s.hierarchical.fits
                 ? strformat("; hierarchical: %d position(s) per node%s", s.hierarchical.owners,
                             s.hierarchical.uniform ? "" : " (uneven nodes: the rest fold in)")
                 : "; hierarchical does not fit: " + s.hierarchical.whyNot;
    table +=
        s.torus.fits ? "; torus " + s.torus.describe : "; torus does not fit: " + s.torus.whyNot;
  }
  return table + "; sizes as nccl-tests counts them; costs: " + costs_.origin;
}

std::vector<std::string> Planner::planDetails() const {
  std::vector<std::string> lines;
  for (int k = 0; k < static_cast<int>(CollKind::kSendRecv); ++k) {
    const auto kind = static_cast<CollKind>(k);
    for (const PlanRange& range : ranges(kind)) {
      const bool everySize = range.fromBytes == 0 && range.toBytes == kPlanMaxBytes;
      std::string line =
          everySize
              ? strformat("%s every size: %s", collName(kind),
                          choiceName(range.algo, range.slices).c_str())
              : strformat("%s %s%s%s%s: %s", collName(kind), range.fromBytes == 0 ? "" : ">",
                          sizeText(range.fromBytes == 0 ? 0 : range.fromBytes - 1).c_str(),
                          range.toBytes == kPlanMaxBytes ? "" : "..",
                          range.toBytes == kPlanMaxBytes ? "" : sizeText(range.toBytes).c_str(),
                          choiceName(range.algo, range.slices).c_str());
      // All-to-all-v has one choice for every size (leastRegret): shown at both ends.
      // A barrier moves no data: modeled at 0.
      std::vector<size_t> sizes = {kind == CollKind::kBarrier ? 0 : representative(range)};
      if (kind == CollKind::kAllToAllv) sizes.insert(sizes.begin(), size_t{4} << 10);
      for (size_t at : sizes) {
        const auto options = ranked(kind, at);
        if (options.empty()) continue;
        line += " (modeled at " + sizeText(at) + ":";
        for (size_t i = 0; i < options.size(); ++i)
          line += strformat("%s %s %.1f us", i == 0 ? "" : ",",
                            choiceName(options[i].algo, options[i].slices).c_str(), options[i].us);
        line += ")";
      }
      lines.push_back(line);
    }
  }
  return lines;
}

}  // namespace trnccl
