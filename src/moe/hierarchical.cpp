// The hierarchical mode (DeepEP's normal mode across nodes): a token crosses to another node
// once, to this rank's proxy there (the rank at the same position in that node, modulo its
// size), over efa; the proxy forwards it inside its node (shm, emulated NeuronLink) to every
// rank holding one of its experts. Combine retraces the path: each expert rank returns its rows
// to the proxy that sent them, the proxy sums them per token (ascending rank) and sends one
// row per token back across the network, and the origin sums its nodes' rows (ascending node).
// What a rank receives, and in what order, is exactly the normal mode's: only the path
// differs. A rank is its own proxy for its own node.
#include <algorithm>

#include "core/dtype.hpp"
#include "core/log.hpp"
#include "moe/ep_group.hpp"
#include "moe/hierarchical_hops.hpp"

namespace trnccl::moe {
namespace {

struct Block {
  int peer;
  const void* src;
  void* dst;
  size_t bytes;
};

// One round of messages whose sizes both sides know (routing creation's id exchanges).
Status exchange(Communicator& comm, const std::vector<Block>& sends,
                const std::vector<Block>& recvs) {
  return comm.runPlan(CollKind::kMoeDispatch, "EpCreateRouting(hierarchical ids)",
                      [&](ScheduleBuilder& b) {
                        ConcurrentSteps together(b);
                        for (const Block& s : sends)
                          if (s.bytes) b.send(s.peer, s.src, s.bytes);
                        for (const Block& r : recvs)
                          if (r.bytes) b.recv(r.peer, r.dst, r.bytes);
                        return Status::ok();
                      });
}

// Where each rank sits in its node, and the proxy an origin uses for a node.
struct NodeMap {
  const topology::Topology& topo;
  std::vector<int> position;  // by rank: index in its node's sorted rank list
  std::vector<std::vector<int>> ranks;

  explicit NodeMap(const topology::Topology& t) : topo(t), position(t.nranks()) {
    for (int node = 0; node < t.nnodes(); ++node) {
      ranks.push_back(t.ranksOfNode(node));
      std::sort(ranks.back().begin(), ranks.back().end());
      for (size_t i = 0; i < ranks.back().size(); ++i) position[ranks.back()[i]] = i;
    }
  }
  int proxyOf(int origin, int node) const {
    if (topo.nodeOf(origin) == node) return origin;
    return ranks[node][position[origin] % ranks[node].size()];
  }
};

}  // namespace

Status buildHierarchical(const EpGroup& g, Routing* rt, const void* idx, trncclDataType_t idxType,
                         const std::vector<uint64_t>& header, size_t width, size_t nodeWord) {
  const NodeMap map(g.comm->topology());
  const int n = g.nranks(), me = g.rank(), K = rt->topk, L = g.localExperts;
  const int N = map.topo.nnodes(), myNode = map.topo.nodeOf(me);
  const size_t T = rt->numTokens;
  HierarchicalLayout& h = rt->hier;
  h.nodeRanks = map.ranks[myNode];
  h.nodeIndex = map.position[me];
  auto nodeOfExpert = [&](int64_t id) { return map.topo.nodeOf(static_cast<int>(id / L)); };
  auto rowsTo = [&](int origin, int dest) { return header[origin * width + 4 + dest]; };

  // Origin: one hop-1 row per (token, other node), with the token's ids on that node.
  h.proxyOfNode.resize(N);
  for (int node = 0; node < N; ++node) h.proxyOfNode[node] = map.proxyOf(me, node);
  std::vector<size_t> count(N + 1, 0);
  std::vector<uint8_t> hits(N);
  auto nodesOf = [&](size_t t) {
    std::fill(hits.begin(), hits.end(), 0);
    for (int k = 0; k < K; ++k) {
      const int64_t id = expertIdAt(idx, idxType, t * K + k);
      if (id >= 0) hits[nodeOfExpert(id)] = 1;
    }
  };
  for (size_t t = 0; t < T; ++t) {
    nodesOf(t);
    for (int node = 0; node < N; ++node)
      if (hits[node] && node != myNode) ++count[node + 1];
  }
  h.hop1Begin.assign(N + 1, 0);
  for (int node = 0; node < N; ++node) h.hop1Begin[node + 1] = h.hop1Begin[node] + count[node + 1];
  h.hop1Token.resize(h.hop1Begin[N]);
  h.hop1Ids.assign(h.hop1Begin[N] * K, -1);
  std::vector<size_t> next(h.hop1Begin.begin(), h.hop1Begin.end() - 1);
  std::vector<int64_t> hop1RowOf(T * N, -1);  // (token, node) -> hop-1 row
  for (size_t t = 0; t < T; ++t) {
    nodesOf(t);
    for (int node = 0; node < N; ++node) {
      if (!hits[node] || node == myNode) continue;
      const size_t row = next[node]++;
      h.hop1Token[row] = static_cast<uint32_t>(t);
      hop1RowOf[t * N + node] = static_cast<int64_t>(row);
      for (int k = 0; k < K; ++k) {
        const int64_t id = expertIdAt(idx, idxType, t * K + k);
        if (id >= 0 && nodeOfExpert(id) == node) h.hop1Ids[row * K + k] = static_cast<int32_t>(id);
      }
    }
  }

  // Proxy: the origins of other nodes whose rows for this node come here, and their ids.
  h.hop1From.clear();
  h.hop1InBegin.assign(1, 0);
  for (int o = 0; o < n; ++o) {
    if (map.topo.nodeOf(o) == myNode || map.proxyOf(o, myNode) != me) continue;
    h.hop1From.push_back(o);
    h.hop1InBegin.push_back(h.hop1InBegin.back() + header[o * width + nodeWord + myNode]);
  }
  h.hop1InIds.assign(h.hop1InBegin.back() * K, -1);
  {
    std::vector<Block> sends, recvs;
    for (int node = 0; node < N; ++node)
      if (node != myNode)
        sends.push_back({h.proxyOfNode[node], h.hop1Ids.data() + (h.hop1Begin[node] * K), nullptr,
                         (h.hop1Begin[node + 1] - h.hop1Begin[node]) * K * sizeof(int32_t)});
    for (size_t i = 0; i < h.hop1From.size(); ++i)
      recvs.push_back({h.hop1From[i], nullptr, h.hop1InIds.data() + (h.hop1InBegin[i] * K),
                       (h.hop1InBegin[i + 1] - h.hop1InBegin[i]) * K * sizeof(int32_t)});
    TRNCCL_RETURN_IF_ERROR(exchange(*g.comm, sends, recvs));
  }

  // Proxy rows, by origin then the origin's order; their ids on this node.
  h.proxyOrigin.clear();
  h.proxySource.clear();
  std::vector<int32_t> proxyIds;
  std::vector<int64_t> proxyRowOfToken(T, -1);
  auto addOwnRows = [&] {
    for (size_t t = 0; t < T; ++t) {
      nodesOf(t);
      if (!hits[myNode]) continue;
      proxyRowOfToken[t] = static_cast<int64_t>(h.proxyOrigin.size());
      h.proxyOrigin.push_back(me);
      h.proxySource.push_back(static_cast<uint32_t>(t));
      for (int k = 0; k < K; ++k) {
        const int64_t id = expertIdAt(idx, idxType, t * K + k);
        proxyIds.push_back(id >= 0 && nodeOfExpert(id) == myNode ? static_cast<int32_t>(id) : -1);
      }
    }
  };
  bool ownAdded = false;
  for (size_t i = 0; i < h.hop1From.size(); ++i) {
    if (!ownAdded && h.hop1From[i] > me) {
      addOwnRows();
      ownAdded = true;
    }
    for (size_t r = h.hop1InBegin[i]; r < h.hop1InBegin[i + 1]; ++r) {
      h.proxyOrigin.push_back(h.hop1From[i]);
      h.proxySource.push_back(static_cast<uint32_t>(r));
      proxyIds.insert(proxyIds.end(), h.hop1InIds.data() + (r * K),
                      h.hop1InIds.data() + (r * K) + K);
    }
  }
  if (!ownAdded) addOwnRows();
  const size_t proxyRows = h.proxyOrigin.size();

  // Hop 2: to each rank of the node, the proxy rows with an expert there, in proxy-row order.
  const int width2 = static_cast<int>(h.nodeRanks.size());
  h.hop2Begin.assign(width2 + 1, 0);
  h.hop2Row.clear();
  h.hop2K.clear();
  h.hop2Ids.clear();
  std::vector<std::pair<int32_t, int>> mine;
  for (int di = 0; di < width2; ++di) {
    const int d = h.nodeRanks[di];
    for (size_t pr = 0; pr < proxyRows; ++pr) {
      mine.clear();
      for (int k = 0; k < K; ++k) {
        const int32_t id = proxyIds[pr * K + k];
        if (id >= 0 && id / L == d) mine.emplace_back(id % L, k);
      }
      if (mine.empty()) continue;
      std::sort(mine.begin(), mine.end());
      h.hop2Row.push_back(static_cast<uint32_t>(pr));
      for (int i = 0; i < K; ++i) {
        const bool used = i < static_cast<int>(mine.size());
        h.hop2K.push_back(static_cast<int16_t>(used ? mine[i].second : -1));
        h.hop2Ids.push_back(used ? mine[i].first : -1);
      }
    }
    h.hop2Begin[di + 1] = h.hop2Row.size();
  }
  h.proxyRowBegin.assign(proxyRows + 1, 0);
  for (uint32_t pr : h.hop2Row) ++h.proxyRowBegin[pr + 1];
  for (size_t pr = 0; pr < proxyRows; ++pr) h.proxyRowBegin[pr + 1] += h.proxyRowBegin[pr];
  h.proxyRowHop2.resize(h.hop2Row.size());
  {
    std::vector<size_t> fill(h.proxyRowBegin.begin(), h.proxyRowBegin.end() - 1);
    for (size_t hr = 0; hr < h.hop2Row.size(); ++hr)
      h.proxyRowHop2[fill[h.hop2Row[hr]]++] = static_cast<uint32_t>(hr);
  }

  // Receiver: from each proxy of the node, the rows of the origins it serves for this node
  // (ascending origin), which land at those origins' flat rows.
  h.hop2InBegin.assign(width2 + 1, 0);
  h.finalRow.clear();
  for (int pi = 0; pi < width2; ++pi) {
    const int p = h.nodeRanks[pi];
    for (int o = 0; o < n; ++o) {
      if (map.proxyOf(o, myNode) != p) continue;
      for (uint64_t i = 0; i < rowsTo(o, me); ++i) h.finalRow.push_back(rt->recvBegin[o] + i);
    }
    h.hop2InBegin[pi + 1] = h.finalRow.size();
  }
  if (h.finalRow.size() != rt->recvRows())
    return makeError(Code::kInternalError,
                     "rank %d trncclEpCreateRouting (hierarchical): %zu rows arrive through the "
                     "node's proxies but the counts say %zu",
                     me, h.finalRow.size(), rt->recvRows());
  std::vector<int32_t> inIds(h.finalRow.size() * K, -1);
  {
    std::vector<Block> sends, recvs;
    for (int di = 0; di < width2; ++di) {
      const size_t rows = h.hop2Begin[di + 1] - h.hop2Begin[di];
      const size_t bytes = rows * K * sizeof(int32_t);
      if (h.nodeRanks[di] == me)
        copyBytes(inIds.data() + (h.hop2InBegin[h.nodeIndex] * K),
                  h.hop2Ids.data() + (h.hop2Begin[di] * K), bytes);
      else
        sends.push_back(
            {h.nodeRanks[di], h.hop2Ids.data() + (h.hop2Begin[di] * K), nullptr, bytes});
    }
    for (int pi = 0; pi < width2; ++pi)
      if (h.nodeRanks[pi] != me)
        recvs.push_back({h.nodeRanks[pi], nullptr, inIds.data() + (h.hop2InBegin[pi] * K),
                         (h.hop2InBegin[pi + 1] - h.hop2InBegin[pi]) * K * sizeof(int32_t)});
    TRNCCL_RETURN_IF_ERROR(exchange(*g.comm, sends, recvs));
  }
  rt->recvIds.assign(rt->recvRows() * K, -1);
  for (size_t j = 0; j < h.finalRow.size(); ++j)
    copyBytes(rt->recvIds.data() + (h.finalRow[j] * K), inIds.data() + (j * K),
              K * sizeof(int32_t));
  buildExpertSide(rt);

  // Origin: what combine sums per token, by node.
  h.tokenPartBegin.assign(T + 1, 0);
  h.tokenParts.clear();
  for (size_t t = 0; t < T; ++t) {
    for (int node = 0; node < N; ++node) {
      if (node == myNode) {
        if (proxyRowOfToken[t] >= 0) h.tokenParts.push_back(-1 - proxyRowOfToken[t]);
      } else if (hop1RowOf[t * N + node] >= 0) {
        h.tokenParts.push_back(hop1RowOf[t * N + node]);
      }
    }
    h.tokenPartBegin[t + 1] = h.tokenParts.size();
  }
  TRNCCL_INFO(log::kMoe,
              "%s rank %d: EP routing, mode hierarchical, %d nodes: %zu rows leave this node "
              "(one per token and node), %zu rows forwarded inside it for %zu origins of "
              "other nodes; receives %zu rows",
              g.comm->name().c_str(), me, N, h.hop1Begin[N], h.hop2Row.size(), h.hop1From.size(),
              rt->recvRows());
  return Status::ok();
}

std::vector<size_t> hop1InOffsets(const HierarchicalLayout& h, size_t rowBytes, int K) {
  const size_t served = h.hop1From.size();
  std::vector<size_t> inAt(served + 1, 0);
  for (size_t i = 0; i < served; ++i)
    inAt[i + 1] = inAt[i] + messageBytes(h.hop1InBegin[i + 1] - h.hop1InBegin[i], rowBytes, K);
  return inAt;
}

std::vector<size_t> servedIndexOf(const HierarchicalLayout& h) {
  std::vector<size_t> servedIndex(h.hop1InBegin.back());
  for (size_t i = 0; i + 1 < h.hop1InBegin.size(); ++i)
    for (size_t r = h.hop1InBegin[i]; r < h.hop1InBegin[i + 1]; ++r) servedIndex[r] = i;
  return servedIndex;
}

void sendHop1(ScheduleBuilder& b, const Routing& rt, const DispatchArgs& a, char* inBase,
              const std::vector<size_t>& inAt) {
  const HierarchicalLayout& h = rt.hier;
  Staging& st = *rt.group->staging;
  const int K = rt.topk, N = static_cast<int>(h.proxyOfNode.size());
  const int myNode = rt.group->comm->topology().nodeOf(rt.group->rank());
  const size_t rowBytes = a.rowBytes, wBytes = K * sizeof(float);
  std::vector<size_t> outAt(N + 1, 0);
  for (int node = 0; node < N; ++node)
    outAt[node + 1] =
        outAt[node] + messageBytes(h.hop1Begin[node + 1] - h.hop1Begin[node], rowBytes, K);
  st.hop1Out.resize(outAt[N]);
  for (int node = 0; node < N; ++node) {
    const size_t rows = h.hop1Begin[node + 1] - h.hop1Begin[node];
    char* msg = st.hop1Out.data() + (outAt[node]);
    for (size_t i = 0; i < rows; ++i) {
      const size_t t = h.hop1Token[h.hop1Begin[node] + i];
      copyBytes(msg + i * rowBytes, byteAt(a.tokens, t * rowBytes), rowBytes);
      float* w = reinterpret_cast<float*>(weightsOf(msg, rows, rowBytes) + i * wBytes);
      for (int k = 0; k < K; ++k) w[k] = a.weights ? a.weights[t * K + k] : 1.0f;
    }
  }
  ConcurrentSteps together(b);
  for (int node = 0; node < N; ++node)
    if (node != myNode && outAt[node + 1] > outAt[node])
      b.send(h.proxyOfNode[node], st.hop1Out.data() + (outAt[node]), outAt[node + 1] - outAt[node]);
  for (size_t i = 0; i + 1 < inAt.size(); ++i)
    if (inAt[i + 1] > inAt[i]) b.recv(h.hop1From[i], inBase + inAt[i], inAt[i + 1] - inAt[i]);
}

Status planDispatchHierarchical(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                                const DispatchArgs& a) {
  if (routing->group->nodeDirect) return planDispatchHierarchicalMapped(b, routing, a);
  const Routing& rt = *routing;
  Staging& st = *rt.group->staging;
  const size_t rowBytes = a.rowBytes;
  const size_t wBytes = rt.topk * sizeof(float);
  const std::vector<size_t> inAt = hop1InOffsets(rt.hier, rowBytes, rt.topk);
  st.hop1In.resize(inAt.back());
  sendHop1(b, rt, a, st.hop1In.data(), inAt);

  // Hop 2, once hop 1 is in: each node rank's rows with the weights of its own experts.
  DispatchArgs args = a;
  b.callback([routing, args, rowBytes, wBytes, inAt](ScheduleBuilder& later) {
    Routing& rt = *routing;
    const HierarchicalLayout& h = rt.hier;
    Staging& st = *rt.group->staging;
    const int K = rt.topk, me = rt.group->rank();
    const int width2 = static_cast<int>(h.nodeRanks.size());
    // Where a proxy row's token and top-k weights are.
    const std::vector<size_t> servedIndex = servedIndexOf(h);
    auto source = [&](size_t pr, const float** weights) -> const char* {
      const size_t s = h.proxySource[pr];
      if (h.proxyOrigin[pr] == me) {
        *weights = args.weights ? args.weights + s * K : nullptr;
        return byteAt(args.tokens, s * rowBytes);
      }
      const size_t i = servedIndex[s], rows = h.hop1InBegin[i + 1] - h.hop1InBegin[i];
      const char* msg = st.hop1In.data() + (inAt[i]);
      *weights = reinterpret_cast<const float*>(weightsOf(msg, rows, rowBytes) +
                                                (s - h.hop1InBegin[i]) * wBytes);
      return msg + (s - h.hop1InBegin[i]) * rowBytes;
    };
    // The rows this rank keeps (its own node position) are not copied: the last step reads
    // them where they are (its tokens or the hop-1 messages); only their weights are written.
    std::vector<size_t> outAt(width2 + 1, 0), inAt2(width2 + 1, 0);
    for (int di = 0; di < width2; ++di) {
      outAt[di + 1] = outAt[di] + messageBytes(h.hop2Begin[di + 1] - h.hop2Begin[di], rowBytes, K);
      const size_t in = di == h.nodeIndex ? 0 : h.hop2InBegin[di + 1] - h.hop2InBegin[di];
      inAt2[di + 1] = inAt2[di] + messageBytes(in, rowBytes, K);
    }
    st.hop2Out.resize(outAt[width2]);
    st.hop2In.resize(inAt2[width2]);
    std::vector<const char*> keptRows(h.hop2Begin[h.nodeIndex + 1] - h.hop2Begin[h.nodeIndex]);
    for (int di = 0; di < width2; ++di) {
      const size_t rows = h.hop2Begin[di + 1] - h.hop2Begin[di];
      char* msg = st.hop2Out.data() + (outAt[di]);
      for (size_t i = 0; i < rows; ++i) {
        const size_t hr = h.hop2Begin[di] + i;
        const float* topk = nullptr;
        const char* row = source(h.hop2Row[hr], &topk);
        if (di == h.nodeIndex)
          keptRows[i] = row;
        else
          copyBytes(msg + i * rowBytes, row, rowBytes);
        hop2Weights(h, hr, K, topk,
                    reinterpret_cast<float*>(weightsOf(msg, rows, rowBytes) + i * wBytes));
      }
    }
    const size_t keptAt = outAt[h.nodeIndex];
    {
      ConcurrentSteps together(later);
      for (int di = 0; di < width2; ++di) {
        if (di == h.nodeIndex) continue;
        if (outAt[di + 1] > outAt[di])
          later.send(h.nodeRanks[di], st.hop2Out.data() + (outAt[di]), outAt[di + 1] - outAt[di]);
        if (inAt2[di + 1] > inAt2[di])
          later.recv(h.nodeRanks[di], st.hop2In.data() + (inAt2[di]), inAt2[di + 1] - inAt2[di]);
      }
    }
    // Every row's weights to its flat place; flat: the row too; expert-major: each row
    // straight from where it arrived (or was kept) into its slots.
    later.callback([routing, args, rowBytes, wBytes, inAt2, keptAt,
                    keptRows = std::move(keptRows)](ScheduleBuilder&) {
      Routing& rt = *routing;
      const HierarchicalLayout& h = rt.hier;
      Staging& st = *rt.group->staging;
      const int K = rt.topk;
      const bool flat = rt.layout == trncclEpLayoutFlat;
      st.recvWeights.resize(rt.recvRows() * K);
      std::vector<const char*> rowOf(flat ? 0 : rt.recvRows());
      for (size_t pi = 0; pi + 1 < h.hop2InBegin.size(); ++pi) {
        const bool kept = static_cast<int>(pi) == h.nodeIndex;
        const size_t rows = h.hop2InBegin[pi + 1] - h.hop2InBegin[pi];
        const char* msg = kept ? st.hop2Out.data() + keptAt : st.hop2In.data() + (inAt2[pi]);
        for (size_t i = 0; i < rows; ++i) {
          const size_t f = h.finalRow[h.hop2InBegin[pi] + i];
          const char* row = kept ? keptRows[i] : msg + i * rowBytes;
          if (flat)
            copyBytes(byteAt(args.outTokens, f * rowBytes), row, rowBytes);
          else
            rowOf[f] = row;
          copyBytes(st.recvWeights.data() + (f * K), weightsOf(msg, rows, rowBytes) + i * wBytes,
                    wBytes);
        }
      }
      return flat ? finishDispatch(rt, args, rowBytes) : finishDispatchRows(rt, args, rowOf.data());
    });
    return Status::ok();
  });
  return Status::ok();
}

void sumProxyRows(const Routing& rt, size_t hidden, size_t rowBytes,
                  const std::function<const char*(size_t)>& resultOf) {
  const HierarchicalLayout& h = rt.hier;
  Staging& st = *rt.group->staging;
  const trncclDataType_t type = rt.group->config.combineType();
  const size_t proxyRows = h.proxyOrigin.size();
  st.partial.resize(proxyRows * rowBytes);
  std::vector<const void*> srcs;
  for (size_t pr = 0; pr < proxyRows; ++pr) {
    srcs.clear();
    for (size_t i = h.proxyRowBegin[pr]; i < h.proxyRowBegin[pr + 1]; ++i)
      srcs.push_back(resultOf(h.proxyRowHop2[i]));
    sumRows(type, st.partial.data() + (pr * rowBytes), srcs.data(), static_cast<int>(srcs.size()),
            hidden, rowBytes);
  }
}

void sendHop1Back(ScheduleBuilder& b, const Routing& rt, size_t rowBytes) {
  const HierarchicalLayout& h = rt.hier;
  Staging& st = *rt.group->staging;
  const int N = static_cast<int>(h.proxyOfNode.size());
  const int myNode = rt.group->comm->topology().nodeOf(rt.group->rank());
  const size_t proxyRows = h.proxyOrigin.size();
  ConcurrentSteps together(b);
  size_t pr = 0;
  for (size_t i = 0; i < h.hop1From.size(); ++i) {
    while (pr < proxyRows && h.proxyOrigin[pr] < h.hop1From[i]) ++pr;  // sorted by origin
    const size_t rows = h.hop1InBegin[i + 1] - h.hop1InBegin[i];
    if (rows > 0) b.send(h.hop1From[i], st.partial.data() + (pr * rowBytes), rows * rowBytes);
    pr += rows;
  }
  for (int node = 0; node < N; ++node) {
    const size_t rows = h.hop1Begin[node + 1] - h.hop1Begin[node];
    if (node != myNode && rows > 0)
      b.recv(h.proxyOfNode[node], st.recvRows.data() + (h.hop1Begin[node] * rowBytes),
             rows * rowBytes);
  }
}

void sumTokenParts(const Routing& rt, const CombineArgs& a, size_t rowBytes) {
  const HierarchicalLayout& h = rt.hier;
  Staging& st = *rt.group->staging;
  std::vector<const void*> parts;
  for (size_t t = 0; t < rt.numTokens; ++t) {
    parts.clear();
    for (size_t i = h.tokenPartBegin[t]; i < h.tokenPartBegin[t + 1]; ++i) {
      const int64_t part = h.tokenParts[i];
      parts.push_back(part >= 0 ? st.recvRows.data() + (part * rowBytes)
                                : st.partial.data() + ((-1 - part) * rowBytes));
    }
    sumRows(rt.group->config.combineType(), byteAt(a.out, t * rowBytes), parts.data(),
            static_cast<int>(parts.size()), a.hidden, rowBytes);
  }
}

Status planCombineHierarchical(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                               const CombineArgs& a) {
  if (routing->group->nodeDirect) return planCombineHierarchicalMapped(b, routing, a);
  const Routing& rt = *routing;
  const HierarchicalLayout& h = rt.hier;
  Staging& st = *rt.group->staging;
  const size_t rowBytes = a.hidden * dtypeSize(rt.group->config.combineType());
  const int width2 = static_cast<int>(h.nodeRanks.size());
  // Hop 2 back: each proxy gets its rows' results in the order it sent them, made there
  // (expert-major: each row's slots summed straight into its message). The rows for this
  // rank's own position stay in hop2Out, where the proxy sums read them.
  st.hop2Out.resize(rt.recvRows() * rowBytes);
  if (rt.layout == trncclEpLayoutFlat) {
    for (size_t j = 0; j < h.finalRow.size(); ++j)
      copyBytes(st.hop2Out.data() + (j * rowBytes),
                byteAt(a.expertTokens, h.finalRow[j] * rowBytes), rowBytes);
  } else {
    sumSlotsInOrder(rt, a, rowBytes, st.hop2Out.data(), h.finalRow);
  }
  st.hop2In.resize(h.hop2Row.size() * rowBytes);
  {
    ConcurrentSteps together(b);
    for (int di = 0; di < width2; ++di) {
      if (di == h.nodeIndex) continue;
      const size_t back = h.hop2InBegin[di + 1] - h.hop2InBegin[di];
      const size_t forth = h.hop2Begin[di + 1] - h.hop2Begin[di];
      if (back > 0)
        b.send(h.nodeRanks[di], st.hop2Out.data() + (h.hop2InBegin[di] * rowBytes),
               back * rowBytes);
      if (forth > 0)
        b.recv(h.nodeRanks[di], st.hop2In.data() + (h.hop2Begin[di] * rowBytes), forth * rowBytes);
    }
  }
  CombineArgs args = a;
  b.callback([routing, args, rowBytes](ScheduleBuilder& later) {
    const Routing& rt = *routing;
    const HierarchicalLayout& h = rt.hier;
    Staging& st = *rt.group->staging;
    // Hop-2 row x came from the node rank at position di; this rank's own rows were kept.
    const size_t keptFirst = h.hop2Begin[h.nodeIndex], keptEnd = h.hop2Begin[h.nodeIndex + 1];
    const char* kept = st.hop2Out.data() + (h.hop2InBegin[h.nodeIndex] * rowBytes);
    sumProxyRows(rt, args.hidden, rowBytes, [&](size_t x) -> const char* {
      return x >= keptFirst && x < keptEnd ? kept + ((x - keptFirst) * rowBytes)
                                           : st.hop2In.data() + (x * rowBytes);
    });
    const int N = static_cast<int>(h.proxyOfNode.size());
    st.recvRows.resize(h.hop1Begin[N] * rowBytes);
    sendHop1Back(later, rt, rowBytes);
    later.callback([routing, args, rowBytes](ScheduleBuilder&) {
      sumTokenParts(*routing, args, rowBytes);
      return Status::ok();
    });
    return Status::ok();
  });
  return Status::ok();
}

}  // namespace trnccl::moe
