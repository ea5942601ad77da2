#include "collectives/registry.hpp"

namespace trnccl {
namespace {

struct Implementation {
  CollKind kind;
  Algorithm algo;
  BuildFn build;
};

// Send/receive is not here: it has one schedule (sendRecvP2p), which the planner never chooses.
const Implementation kImplementations[] = {
    {CollKind::kAllReduce, Algorithm::kRing, allReduceRing},
    {CollKind::kAllReduce, Algorithm::kDirect, allReduceDirect},
    {CollKind::kAllReduce, Algorithm::kHierarchical, allReduceHierarchical},
    {CollKind::kAllReduce, Algorithm::kTorus, allReduceTorus},
    {CollKind::kAllReduce, Algorithm::kRecursiveDoubling, allReduceRecursiveDoubling},
    {CollKind::kAllReduce, Algorithm::kRhd, allReduceRhd},
    {CollKind::kAllReduce, Algorithm::kTree, allReduceTree},
    {CollKind::kAllGather, Algorithm::kRing, allGatherRing},
    {CollKind::kAllGather, Algorithm::kDirect, allGatherDirect},
    {CollKind::kAllGather, Algorithm::kHierarchical, allGatherHierarchical},
    {CollKind::kAllGather, Algorithm::kTorus, allGatherTorus},
    {CollKind::kAllGather, Algorithm::kBruck, allGatherBruck},
    {CollKind::kReduceScatter, Algorithm::kRing, reduceScatterRing},
    {CollKind::kReduceScatter, Algorithm::kDirect, reduceScatterDirect},
    {CollKind::kReduceScatter, Algorithm::kHierarchical, reduceScatterHierarchical},
    {CollKind::kReduceScatter, Algorithm::kTorus, reduceScatterTorus},
    {CollKind::kBroadcast, Algorithm::kRing, broadcastChain},
    {CollKind::kBroadcast, Algorithm::kDirect, broadcastDirect},
    {CollKind::kBroadcast, Algorithm::kHierarchical, broadcastHierarchical},
    {CollKind::kBroadcast, Algorithm::kBinomial, broadcastBinomial},
    {CollKind::kReduce, Algorithm::kRing, reduceChain},
    {CollKind::kReduce, Algorithm::kDirect, reduceDirect},
    {CollKind::kReduce, Algorithm::kBinomial, reduceBinomial},
    {CollKind::kAllToAll, Algorithm::kRing, allToAllPairwise},
    {CollKind::kAllToAll, Algorithm::kDirect, allToAllDirect},
    {CollKind::kAllToAll, Algorithm::kHierarchical, allToAllNodeAggregated},
    {CollKind::kAllToAll, Algorithm::kBruck, allToAllBruck},
    {CollKind::kAllToAllv, Algorithm::kRing, allToAllPairwise},
    {CollKind::kAllToAllv, Algorithm::kDirect, allToAllDirect},
    {CollKind::kAllToAllv, Algorithm::kHierarchical, allToAllNodeAggregated},
    {CollKind::kBarrier, Algorithm::kRing, barrierDissemination},
    {CollKind::kBarrier, Algorithm::kDirect, barrierDirect},
};

}  // namespace

const std::vector<AlgorithmInfo>& algorithms() {
  static const std::vector<AlgorithmInfo> table = {
      {Algorithm::kRing, "ring", "chain,pairwise",
       "the ring family: ring all-reduce/all-gather/reduce-scatter, pipelined chain broadcast "
       "and reduce, pairwise all-to-all, dissemination barrier; any transport, link order"},
      {Algorithm::kDirect, "direct", "",
       "one node only: ranks read each other's shared-memory windows (one-shot, two-shot, "
       "lines for small calls)"},
      {Algorithm::kHierarchical, "hierarchical", "hier",
       "inside each node, then between nodes among ranks at the same position, then inside "
       "each node again; node-aggregated all-to-all"},
      {Algorithm::kTorus, "torus", "", "one ring per torus dimension along the NeuronLinks"},
      {Algorithm::kRecursiveDoubling, "rd", "recursive_doubling",
       "all-reduce in log2(n) rounds of whole-buffer exchanges: the fewest rounds, the most "
       "bytes"},
      {Algorithm::kRhd, "rhd", "rabenseifner",
       "all-reduce as recursive-halving reduce-scatter + recursive-doubling all-gather: ring "
       "bytes in 2 log2(n) rounds"},
      {Algorithm::kTree, "tree", "double_binary_tree",
       "all-reduce over two in-order binary trees, each reducing half the buffer up and "
       "broadcasting it down in pipelined chunks: ring bytes at log2(n) depth"},
      {Algorithm::kBruck, "bruck", "",
       "all-gather and all-to-all in ceil(log2 n) rounds (any n): the small-block forms"},
      {Algorithm::kBinomial, "binomial", "",
       "broadcast and reduce along a binomial tree: ceil(log2 n) rounds of whole buffers"},
  };
  return table;
}

const char* algorithmName(Algorithm algo) {
  for (const auto& info : algorithms())
    if (info.algo == algo) return info.name;
  return "?";
}

std::optional<Algorithm> algorithmFromName(std::string_view name) {
  for (const auto& info : algorithms()) {
    if (name == info.name) return info.algo;
    std::string_view aliases = info.aliases;
    while (!aliases.empty()) {
      const size_t comma = aliases.find(',');
      if (aliases.substr(0, comma) == name) return info.algo;
      aliases = comma == std::string_view::npos ? "" : aliases.substr(comma + 1);
    }
  }
  return std::nullopt;
}

std::string knownAlgorithmNames() {
  std::string names;
  for (const auto& info : algorithms()) {
    if (!names.empty()) names += ", ";
    names += info.name;
  }
  return names;
}

BuildFn builderFor(CollKind kind, Algorithm algo) {
  if (kind == CollKind::kSendRecv) return algo == Algorithm::kRing ? sendRecvP2p : nullptr;
  for (const auto& impl : kImplementations)
    if (impl.kind == kind && impl.algo == algo) return impl.build;
  return nullptr;
}

}  // namespace trnccl
