// Dispatch: every token goes once to each rank that holds one of its experts. The plan packs
// the rows for peers (the only copy on the sending side), receives each source's rows straight
// into their place in the caller's output (flat) or into staging that is then scattered into
// the expert zones (expert-major), and writes the weights and local ids the layout asks for.
// The counts were fixed by the routing, so nothing is exchanged but the rows and weights.
#include <cstring>

#include "core/dtype.hpp"
#include "moe/ep_group.hpp"

namespace trnccl::moe {
namespace {

const char* byteAt(const void* p, size_t offset) {
  return static_cast<const char*>(p) + offset;
}
char* byteAt(void* p, size_t offset) {
  return static_cast<char*>(p) + offset;
}

}  // namespace

Status checkRowBytes(const Routing& routing, size_t hidden, const char* fn) {
  const EpGroup& g = *routing.group;
  const size_t esize = dtypeSize(g.config.payload);
  if (hidden == 0 || hidden > g.config.maxTokenBytes / esize)
    return makeError(Code::kInvalidArgument,
                     "rank %d %s: hidden=%zu elements of %s (%zu bytes) must be between 1 and "
                     "the group's maxTokenBytes (%zu bytes)",
                     g.rank(), fn, hidden, dtypeName(g.config.payload), hidden * esize,
                     g.config.maxTokenBytes);
  return Status::ok();
}

Status checkDispatch(const Routing& routing, const DispatchArgs& a) {
  const EpGroup& g = *routing.group;
  const char* fn = "trncclEpDispatch";
  TRNCCL_RETURN_IF_ERROR(checkRowBytes(routing, a.hidden, fn));
  if (routing.numTokens > 0 && !a.tokens)
    return makeError(Code::kInvalidArgument, "rank %d %s: tokens is NULL with %zu tokens", g.rank(),
                     fn, routing.numTokens);
  const size_t need = routing.received();
  const char* unit = routing.layout == trncclEpLayoutFlat ? "rows" : "slots";
  if (a.outCapacity < need)
    return makeError(Code::kInvalidArgument,
                     "rank %d %s: this rank receives %zu %s but outCapacity is %zu; pass "
                     "outputs of at least trncclEpRoutingGetCounts' numRecv %s (at most "
                     "maxRecvTokensPerRank = %d)",
                     g.rank(), fn, need, unit, a.outCapacity, unit, g.config.maxRecvTokens);
  if (need > 0 && !a.outTokens)
    return makeError(Code::kInvalidArgument, "rank %d %s: outTokens is NULL but %zu %s arrive",
                     g.rank(), fn, need, unit);
  return Status::ok();
}

Status planDispatch(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                    const DispatchArgs& a) {
  const Routing& rt = *routing;
  const EpGroup& g = *rt.group;
  Staging& st = *g.staging;
  const int n = g.nranks(), me = g.rank(), K = rt.topk;
  const size_t rowBytes = a.hidden * dtypeSize(g.config.payload);
  const size_t rows = rt.sendBegin[n], recvRows = rt.recvRows();
  const bool flat = rt.layout == trncclEpLayoutFlat;

  // Pack: rows for peers into staging, every row's weights (in the order of its local ids).
  st.sendRows.resize(rows * rowBytes);
  st.sendWeights.resize(rows * K);
  for (int q = 0; q < n; ++q) {
    for (size_t p = rt.sendBegin[q]; p < rt.sendBegin[q + 1]; ++p) {
      const size_t t = rt.rowToken[p];
      if (q != me)
        std::memcpy(&st.sendRows[p * rowBytes], byteAt(a.tokens, t * rowBytes), rowBytes);
      for (int i = 0; i < K; ++i) {
        const int k = rt.rowK[p * K + i];
        st.sendWeights[p * K + i] = k < 0 ? 0.0f : (a.weights ? a.weights[t * K + k] : 1.0f);
      }
    }
  }
  // Rows arrive in the caller's output (flat) or in staging (expert-major); weights always in
  // staging, from which the final step writes them in the layout's shape.
  st.recvRows.resize(flat ? 0 : recvRows * rowBytes);
  st.recvWeights.resize(recvRows * K);
  char* rowsInto = flat ? static_cast<char*>(a.outTokens) : st.recvRows.data();
  const size_t selfRows = rt.sendRows(me);
  if (flat)
    for (size_t i = 0; i < selfRows; ++i)
      std::memcpy(byteAt(rowsInto, (rt.recvBegin[me] + i) * rowBytes),
                  byteAt(a.tokens, rt.rowToken[rt.sendBegin[me] + i] * rowBytes), rowBytes);
  std::memcpy(&st.recvWeights[rt.recvBegin[me] * K], &st.sendWeights[rt.sendBegin[me] * K],
              selfRows * K * sizeof(float));

  {
    ConcurrentSteps together(b);
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      if (rt.sendRows(q) > 0)
        b.send(q, &st.sendRows[rt.sendBegin[q] * rowBytes], rt.sendRows(q) * rowBytes);
      if (rt.recvRowsFrom(q) > 0)
        b.recv(q, byteAt(rowsInto, rt.recvBegin[q] * rowBytes), rt.recvRowsFrom(q) * rowBytes);
    }
  }
  {
    ConcurrentSteps together(b);  // one message per peer and direction at a time
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      if (rt.sendRows(q) > 0)
        b.send(q, &st.sendWeights[rt.sendBegin[q] * K], rt.sendRows(q) * K * sizeof(float));
      if (rt.recvRowsFrom(q) > 0)
        b.recv(q, &st.recvWeights[rt.recvBegin[q] * K], rt.recvRowsFrom(q) * K * sizeof(float));
    }
  }
  DispatchArgs args = a;
  b.callback([routing, args, rowBytes](ScheduleBuilder&) {
    Routing& rt = *routing;
    Staging& st = *rt.group->staging;
    const int me = rt.group->rank(), K = rt.topk;
    const size_t recvRows = rt.recvRows();
    if (rt.layout == trncclEpLayoutFlat) {
      if (args.outWeights)
        std::memcpy(args.outWeights, st.recvWeights.data(), recvRows * K * sizeof(float));
      if (args.outIdx)
        for (size_t e = 0; e < recvRows * K; ++e) args.outIdx[e] = rt.recvIds[e];
      return Status::ok();
    }
    // Expert-major: each row into the slot of every local expert it is for. This rank's own
    // rows come straight from its tokens.
    rt.slotWeights.assign(rt.recvSlots(), 0.0f);
    const size_t selfBegin = rt.recvBegin[me], selfEnd = rt.recvBegin[me + 1];
    for (size_t j = 0; j < recvRows; ++j) {
      const char* row =
          j >= selfBegin && j < selfEnd
              ? byteAt(args.tokens, rt.rowToken[rt.sendBegin[me] + (j - selfBegin)] * rowBytes)
              : &st.recvRows[j * rowBytes];
      for (int i = 0; i < K && rt.recvIds[j * K + i] >= 0; ++i) {
        const int64_t slot = rt.slotOf[j * K + i];
        std::memcpy(byteAt(args.outTokens, slot * rowBytes), row, rowBytes);
        rt.slotWeights[slot] = st.recvWeights[j * K + i];
      }
    }
    if (args.outWeights)
      std::memcpy(args.outWeights, rt.slotWeights.data(), rt.slotWeights.size() * sizeof(float));
    return Status::ok();
  });
  return Status::ok();
}

}  // namespace trnccl::moe
