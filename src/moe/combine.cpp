// Combine: the experts' outputs go back to the ranks their tokens came from and are summed
// into the tokens' original order. The expert side sends each source's rows as one message
// (flat: straight from the caller's buffer; expert-major: each row's slots summed first, in
// ascending local expert order, scaled by their weights when asked), and the origin sums each
// token's rows in ascending rank order with the fp32-accumulating reduction kernels (fp64
// payloads in fp64): a fixed order, so the result is bitwise the same run to run.
#include <cstring>

#include "core/dtype.hpp"
#include "core/reduce.hpp"
#include "moe/ep_group.hpp"

namespace trnccl::moe {

// dst = srcs[0] + ... + srcs[n-1] (n may be 0 or 1), accumulated in fp32 in that order.
void sumRows(trncclDataType_t type, void* dst, const void* const* srcs, int n, size_t hidden,
             size_t rowBytes) {
  if (n == 0) {
    std::memset(dst, 0, rowBytes);
  } else if (n == 1) {
    copyBytes(dst, srcs[0], rowBytes);
  } else {
    ReduceArgs args{type, trncclSum, dst, srcs, n, hidden, 0};
    reduce(args);
  }
}

void prefetchSlots(const char* slotsBase, const int64_t* slotOf, int K, size_t rowBytes) {
  for (int i = 0; i < K && slotOf[i] >= 0; ++i) {
    const char* slot = slotsBase + (slotOf[i] * rowBytes);
    for (size_t offset = 0; offset < rowBytes; offset += 64) __builtin_prefetch(slot + offset);
  }
}

void sumRowSlots(trncclDataType_t type, void* dst, const char* slotsBase, const int64_t* slotOf,
                 int K, const float* slotWeights, size_t hidden, size_t rowBytes, float* acc,
                 const void** srcs) {
  int n = 0;
  while (n < K && slotOf[n] >= 0) {
    srcs[n] = slotsBase + (slotOf[n] * rowBytes);
    ++n;
  }
  if (!slotWeights) {
    sumRows(type, dst, srcs, n, hidden, rowBytes);
  } else if (type == trncclFloat64) {  // fp64 (gradient checks) accumulates in fp64
    double* out = static_cast<double*>(dst);
    std::fill(out, out + hidden, 0.0);
    for (int i = 0; i < n; ++i) {
      const double w = slotWeights[slotOf[i]];
      const double* src = static_cast<const double*>(srcs[i]);
      for (size_t k = 0; k < hidden; ++k) out[k] += w * src[k];
    }
  } else if (n == 0) {
    std::memset(dst, 0, rowBytes);
  } else {
    // Slot by slot into acc in fp32, the last one rounded straight into dst (one pass less
    // than adding it into acc and then storing acc); vector kernels per ISA (core/reduce.hpp).
    for (int i = 0; i < n; ++i) {
      const bool last = i + 1 == n;
      scaleAdd({type, slotWeights[slotOf[i]], srcs[i], i == 0 ? nullptr : acc, last ? dst : nullptr,
                acc, hidden});
    }
  }
}

namespace {

// Rows rowAt(0..count) made from their slots into out[0..count) (weighted: each slot times the
// weight it was dispatched with).
template <typename RowAt>
void sumSlotRows(const Routing& rt, const CombineArgs& a, size_t rowBytes, char* out, size_t count,
                 RowAt rowAt) {
  Staging& st = *rt.group->staging;
  const trncclDataType_t type = rt.group->config.combineType();
  const int K = rt.topk;
  const char* slots = static_cast<const char*>(a.expertTokens);
  const float* weights = a.weighted ? rt.slotWeights.data() : nullptr;
  st.accumulator.resize(a.hidden);
  std::vector<const void*> srcs(K);
  // A row's slots lie in different expert zones, each a short stream that the hardware
  // prefetcher picks up late (it stops at every page): fetch the next row's slots while this
  // one is summed.
  if (count > 0) prefetchSlots(slots, &rt.slotOf[rowAt(0) * K], K, rowBytes);
  for (size_t i = 0; i < count; ++i) {
    if (i + 1 < count) prefetchSlots(slots, &rt.slotOf[rowAt(i + 1) * K], K, rowBytes);
    sumRowSlots(type, out + (i * rowBytes), slots, &rt.slotOf[rowAt(i) * K], K, weights, a.hidden,
                rowBytes, st.accumulator.data(), srcs.data());
  }
}

}  // namespace

// Expert-major rows for the trip back: each received row is the sum of its slots.
void sumSlots(const Routing& rt, const CombineArgs& a, size_t rowBytes, char* rowsOut,
              int skipOrigin) {
  for (int q = 0; q < rt.group->nranks(); ++q) {
    if (q == skipOrigin) continue;
    const size_t first = rt.recvBegin[q];
    sumSlotRows(rt, a, rowBytes, rowsOut + (first * rowBytes), rt.recvRowsFrom(q),
                [first](size_t i) { return first + i; });
  }
}

void sumSlotsInOrder(const Routing& rt, const CombineArgs& a, size_t rowBytes, char* rowsOut,
                     const std::vector<size_t>& order) {
  sumSlotRows(rt, a, rowBytes, rowsOut, order.size(), [&order](size_t i) { return order[i]; });
}

const char* expertRowsInFlatOrder(const Routing& rt, const CombineArgs& a, size_t rowBytes,
                                  Staging& st) {
  if (rt.layout == trncclEpLayoutFlat) return static_cast<const char*>(a.expertTokens);
  st.sendRows.resize(rt.recvRows() * rowBytes);
  sumSlots(rt, a, rowBytes, st.sendRows.data(), /*skipOrigin=*/-1);
  return st.sendRows.data();
}

Status checkCombine(const Routing& routing, const CombineArgs& a) {
  const EpGroup& g = *routing.group;
  const char* fn = "trncclEpCombine";
  TRNCCL_RETURN_IF_ERROR(checkRowBytes(routing, a.hidden, fn));
  // Low latency: what arrived is known only to the dispatch (possibly still queued), so the
  // buffer is required whatever it holds.
  if (!a.expertTokens && (routing.lowLatency || routing.received() > 0))
    return makeError(Code::kInvalidArgument,
                     "rank %d %s: expertTokens is NULL but this rank received rows or slots "
                     "(or, low latency, may have)",
                     g.rank(), fn);
  if (routing.numTokens > 0 && !a.out)
    return makeError(Code::kInvalidArgument, "rank %d %s: out is NULL with %zu tokens", g.rank(),
                     fn, routing.numTokens);
  if (a.weighted && routing.layout == trncclEpLayoutFlat)
    return makeError(Code::kInvalidArgument,
                     "rank %d %s: weighted combine needs the expert-major layout (one slot per "
                     "token and expert, so each slot has one weight); in the flat layout a row "
                     "mixes this rank's experts, so apply the weights before combining",
                     g.rank(), fn);
  if ((routing.lowLatency || a.weighted) && !routing.dispatchQueued.load())
    return makeError(Code::kInvalidUsage,
                     "rank %d %s: %s from a dispatch with this routing, and none was made; "
                     "dispatch first",
                     g.rank(), fn,
                     routing.lowLatency ? "a low-latency routing learns what this rank received "
                                          "from its first dispatch, so combine needs one"
                                        : "the weighted combine takes its weights");
  return Status::ok();
}

Status planCombine(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                   const CombineArgs& a) {
  const Routing& rt = *routing;
  const EpGroup& g = *rt.group;
  Staging& st = *g.staging;
  const int n = g.nranks(), me = g.rank();
  const size_t rowBytes = a.hidden * dtypeSize(g.config.combineType());
  const size_t rows = rt.sendBegin[n];

  // checkCombine saw a dispatch queued before this call; it has run by now.
  if (!rt.expertSideReady || (a.weighted && rt.slotWeights.size() != rt.recvSlots()))
    return makeError(Code::kInternalError,
                     "rank %d trncclEpCombine: the dispatch queued before it left no layout "
                     "or weights",
                     me);
  if (rt.hierarchical) return planCombineHierarchical(b, routing, a);
  if (g.direct) return planCombineDirect(b, routing, a);
  const char* expertRows = expertRowsInFlatOrder(rt, a, rowBytes, st);
  st.recvRows.resize(rows * rowBytes);
  {
    ConcurrentSteps together(b);
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      if (rt.recvRowsFrom(q) > 0)
        b.send(q, byteAt(expertRows, rt.recvBegin[q] * rowBytes), rt.recvRowsFrom(q) * rowBytes);
      if (rt.sendRows(q) > 0)
        b.recv(q, st.recvRows.data() + (rt.sendBegin[q] * rowBytes), rt.sendRows(q) * rowBytes);
    }
  }
  CombineArgs args = a;
  b.callback([routing, args, rowBytes, expertRows](ScheduleBuilder&) {
    const Routing& rt = *routing;
    Staging& st = *rt.group->staging;
    const int me = rt.group->rank();
    const size_t selfBegin = rt.sendBegin[me], selfEnd = rt.sendBegin[me + 1];
    std::vector<const void*> srcs;
    for (size_t t = 0; t < rt.numTokens; ++t) {
      srcs.clear();
      for (size_t i = rt.tokenBegin[t]; i < rt.tokenBegin[t + 1]; ++i) {
        const size_t p = rt.tokenRows[i];
        srcs.push_back(p >= selfBegin && p < selfEnd
                           ? byteAt(expertRows, (rt.recvBegin[me] + (p - selfBegin)) * rowBytes)
                           : st.recvRows.data() + (p * rowBytes));
      }
      sumRows(rt.group->config.combineType(), byteAt(args.out, t * rowBytes), srcs.data(),
              static_cast<int>(srcs.size()), args.hidden, rowBytes);
    }
    return Status::ok();
  });
  return Status::ok();
}

}  // namespace trnccl::moe
