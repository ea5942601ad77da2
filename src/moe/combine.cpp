// Combine: the experts' outputs go back to the ranks their tokens came from and are summed
// into the tokens' original order. The expert side sends each source's rows as one message
// (flat: straight from the caller's buffer; expert-major: each row's slots summed first, in
// ascending local expert order, scaled by their weights when asked), and the origin sums each
// token's rows in ascending rank order with the fp32-accumulating reduction kernels: a fixed
// order, so the result is bitwise the same run to run.
#include <cstring>

#include "core/dtype.hpp"
#include "core/reduce.hpp"
#include "moe/ep_group.hpp"

namespace trnccl::moe {

Status checkRowBytes(const Routing& routing, size_t hidden, const char* fn);  // dispatch.cpp

namespace {

const char* byteAt(const void* p, size_t offset) {
  return static_cast<const char*>(p) + offset;
}
char* byteAt(void* p, size_t offset) {
  return static_cast<char*>(p) + offset;
}

float loadElement(trncclDataType_t type, const void* row, size_t i) {
  switch (type) {
    case trncclBfloat16: return bf16ToFloat(static_cast<const uint16_t*>(row)[i]);
    case trncclFloat16: return fp16ToFloat(static_cast<const uint16_t*>(row)[i]);
    default: return static_cast<const float*>(row)[i];
  }
}

void storeRow(trncclDataType_t type, const float* acc, void* row, size_t hidden) {
  switch (type) {
    case trncclBfloat16:
      for (size_t i = 0; i < hidden; ++i) static_cast<uint16_t*>(row)[i] = floatToBf16(acc[i]);
      break;
    case trncclFloat16:
      for (size_t i = 0; i < hidden; ++i) static_cast<uint16_t*>(row)[i] = floatToFp16(acc[i]);
      break;
    default: std::memcpy(row, acc, hidden * sizeof(float));
  }
}

// dst = srcs[0] + ... + srcs[n-1] (n may be 0 or 1), accumulated in fp32 in that order.
void sumRows(trncclDataType_t type, void* dst, const void* const* srcs, int n, size_t hidden,
             size_t rowBytes) {
  if (n == 0) {
    std::memset(dst, 0, rowBytes);
  } else if (n == 1) {
    std::memcpy(dst, srcs[0], rowBytes);
  } else {
    ReduceArgs args{type, trncclSum, dst, srcs, n, hidden, 0};
    reduce(args);
  }
}

// Expert-major rows for the trip back: each received row is the sum of its slots (weighted:
// each slot times the weight it was dispatched with).
void sumSlots(const Routing& rt, const CombineArgs& a, size_t rowBytes, Staging& st) {
  const trncclDataType_t type = rt.group->config.payload;
  const int K = rt.topk;
  const size_t rows = rt.recvRows();
  std::vector<const void*> srcs(K);
  st.accumulator.resize(a.hidden);
  for (size_t j = 0; j < rows; ++j) {
    void* dst = &st.sendRows[j * rowBytes];
    int n = 0;
    while (n < K && rt.slotOf[j * K + n] >= 0) {
      srcs[n] = byteAt(a.expertTokens, rt.slotOf[j * K + n] * rowBytes);
      ++n;
    }
    if (!a.weighted) {
      sumRows(type, dst, srcs.data(), n, a.hidden, rowBytes);
      continue;
    }
    float* acc = st.accumulator.data();
    std::fill(acc, acc + a.hidden, 0.0f);
    for (int i = 0; i < n; ++i) {
      const float w = rt.slotWeights[rt.slotOf[j * K + i]];
      for (size_t h = 0; h < a.hidden; ++h) acc[h] += w * loadElement(type, srcs[i], h);
    }
    storeRow(type, acc, dst, a.hidden);
  }
}

}  // namespace

Status checkCombine(const Routing& routing, const CombineArgs& a) {
  const EpGroup& g = *routing.group;
  const char* fn = "trncclEpCombine";
  TRNCCL_RETURN_IF_ERROR(checkRowBytes(routing, a.hidden, fn));
  if (routing.received() > 0 && !a.expertTokens)
    return makeError(Code::kInvalidArgument,
                     "rank %d %s: expertTokens is NULL but this rank received %zu rows/slots",
                     g.rank(), fn, routing.received());
  if (routing.numTokens > 0 && !a.out)
    return makeError(Code::kInvalidArgument, "rank %d %s: out is NULL with %zu tokens", g.rank(),
                     fn, routing.numTokens);
  if (a.weighted && routing.layout == trncclEpLayoutFlat)
    return makeError(Code::kInvalidArgument,
                     "rank %d %s: weighted combine needs the expert-major layout (one slot per "
                     "token and expert, so each slot has one weight); in the flat layout a row "
                     "mixes this rank's experts, so apply the weights before combining",
                     g.rank(), fn);
  return Status::ok();
}

Status planCombine(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                   const CombineArgs& a) {
  const Routing& rt = *routing;
  const EpGroup& g = *rt.group;
  Staging& st = *g.staging;
  const int n = g.nranks(), me = g.rank();
  const size_t rowBytes = a.hidden * dtypeSize(g.config.payload);
  const size_t rows = rt.sendBegin[n];

  // Checked here, not when the call is made: a dispatch queued before it has run by now.
  if (a.weighted && rt.slotWeights.size() != rt.recvSlots())
    return makeError(Code::kInvalidUsage,
                     "rank %d trncclEpCombine: weighted combine uses the weights of the last "
                     "dispatch with this routing, and there was none",
                     me);
  // The expert side's rows, in the flat order.
  const char* expertRows = static_cast<const char*>(a.expertTokens);
  if (rt.layout == trncclEpLayoutExpertMajor) {
    st.sendRows.resize(rt.recvRows() * rowBytes);
    sumSlots(rt, a, rowBytes, st);
    expertRows = st.sendRows.data();
  }
  st.recvRows.resize(rows * rowBytes);
  {
    ConcurrentSteps together(b);
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      if (rt.recvRowsFrom(q) > 0)
        b.send(q, byteAt(expertRows, rt.recvBegin[q] * rowBytes), rt.recvRowsFrom(q) * rowBytes);
      if (rt.sendRows(q) > 0)
        b.recv(q, &st.recvRows[rt.sendBegin[q] * rowBytes], rt.sendRows(q) * rowBytes);
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
                           : &st.recvRows[p * rowBytes]);
      }
      sumRows(rt.group->config.payload, byteAt(args.out, t * rowBytes), srcs.data(),
              static_cast<int>(srcs.size()), args.hidden, rowBytes);
    }
    return Status::ok();
  });
  return Status::ok();
}

}  // namespace trnccl::moe
