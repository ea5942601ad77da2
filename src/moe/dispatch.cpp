// Dispatch: every token goes once to each rank that holds one of its experts. The plan packs
// the rows for peers (the only copy on the sending side), receives each source's rows straight
// into their place in the caller's output (flat) or into staging that is then scattered into
// the expert zones (expert-major), and writes the weights and local ids the layout asks for.
// The counts were fixed by the routing, so nothing is exchanged but the rows and weights.
// A scaled (fp8) dispatch moves each row with its token's scale appended, so every mode
// carries the scales without a message of their own.

#include "core/dtype.hpp"
#include "moe/ep_group.hpp"

namespace trnccl::moe {
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
  const char* fn = a.scaled ? "trncclEpDispatchScaled" : "trncclEpDispatch";
  if (g.config.fp8() && !a.scaled)
    return makeError(Code::kInvalidArgument,
                     "rank %d %s: the group's payload is %s, whose tokens travel with one scale "
                     "per token; call trncclEpDispatchScaled",
                     g.rank(), fn, dtypeName(g.config.payload));
  if (!g.config.fp8() && a.scaled)
    return makeError(Code::kInvalidArgument,
                     "rank %d %s: per-token scales go with fp8 payloads (f8e4m3, f8e5m2) and the "
                     "group's payload is %s; call trncclEpDispatch",
                     g.rank(), fn, dtypeName(g.config.payload));
  TRNCCL_RETURN_IF_ERROR(checkRowBytes(routing, a.hidden, fn));
  if (routing.numTokens > 0 && !a.tokens)
    return makeError(Code::kInvalidArgument, "rank %d %s: tokens is NULL with %zu tokens", g.rank(),
                     fn, routing.numTokens);
  if (a.scaled && routing.numTokens > 0 && !a.tokenScales)
    return makeError(Code::kInvalidArgument,
                     "rank %d %s: tokenScales is NULL with %zu tokens (one float per token)",
                     g.rank(), fn, routing.numTokens);
  // Low latency: the counts come with the dispatch, so outputs must hold the worst case.
  const size_t need = routing.lowLatency ? routing.lowLatencyCapacity : routing.received();
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
  if (a.scaled && need > 0 && !a.outScales)
    return makeError(Code::kInvalidArgument,
                     "rank %d %s: outScales is NULL but %zu %s arrive (one scale each)", g.rank(),
                     fn, need, unit);
  return Status::ok();
}

// Scaled dispatch: where a row's scale sits in its wire row (after the fp8 bytes, aligned).
size_t scaleOffset(size_t payloadBytes) {
  return (payloadBytes + alignof(float) - 1) / alignof(float) * alignof(float);
}

void landRow(const DispatchArgs& a, size_t payloadBytes, size_t j, const char* row, CopyKind kind) {
  if (!a.scaled) {
    copyBytes(byteAt(a.outTokens, j * a.rowBytes), row, a.rowBytes, kind);
    return;
  }
  copyBytes(byteAt(a.callerOutTokens, j * payloadBytes), row, payloadBytes);
  copyBytes(a.outScales + j, row + scaleOffset(payloadBytes), sizeof(float));
}

namespace {

// The caller's tokens with their scales appended into staging, and (flat: rows land in the
// output as they arrive) the output redirected to staging of the wire rows, which
// finishDispatch splits into the caller's buffers; expert-major rows are split as they are
// written into their slots.
DispatchArgs withScales(const Routing& rt, const DispatchArgs& a, size_t payloadBytes) {
  Staging& st = *rt.group->staging;
  DispatchArgs wire = a;
  wire.rowBytes = scaleOffset(payloadBytes) + sizeof(float);
  st.scaledIn.resize(rt.numTokens * wire.rowBytes);
  for (size_t t = 0; t < rt.numTokens; ++t) {
    char* row = st.scaledIn.data() + (t * wire.rowBytes);
    copyBytes(row, byteAt(a.tokens, t * payloadBytes), payloadBytes);
    copyBytes(row + scaleOffset(payloadBytes), a.tokenScales + t, sizeof(float));
  }
  const bool flat = rt.layout == trncclEpLayoutFlat;
  st.scaledOut.resize(flat ? (rt.lowLatency ? rt.lowLatencyCapacity : rt.received()) * wire.rowBytes
                           : 0);
  wire.tokens = st.scaledIn.data();
  wire.callerOutTokens = a.outTokens;
  if (flat) wire.outTokens = st.scaledOut.data();
  return wire;
}

void splitScales(const Routing& rt, const DispatchArgs& wire) {
  const size_t payloadBytes = wire.hidden * dtypeSize(rt.group->config.payload);
  const char* rows = static_cast<const char*>(wire.outTokens);
  for (size_t j = 0; j < rt.received(); ++j) {
    const char* row = rows + (j * wire.rowBytes);
    copyBytes(byteAt(wire.callerOutTokens, j * payloadBytes), row, payloadBytes);
    copyBytes(wire.outScales + j, row + scaleOffset(payloadBytes), sizeof(float));
  }
}

}  // namespace

void packRows(const Routing& rt, const DispatchArgs& a, size_t rowBytes, char* rows,
              float* weights) {
  const int n = rt.group->nranks(), me = rt.group->rank(), K = rt.topk;
  for (int q = 0; q < n; ++q) {
    for (size_t p = rt.sendBegin[q]; p < rt.sendBegin[q + 1]; ++p) {
      const size_t t = rt.rowToken[p];
      if (q != me && rows)
        copyBytes(rows + (p * rowBytes), byteAt(a.tokens, t * rowBytes), rowBytes);
      for (int i = 0; i < K; ++i) {
        const int k = rt.rowK[p * K + i];
        weights[p * K + i] = k < 0 ? 0.0f : (a.weights ? a.weights[t * K + k] : 1.0f);
      }
    }
  }
}

namespace {

// Rows for peers into staging, and every row's weights in the order of its local ids.
void pack(const Routing& rt, const DispatchArgs& a, size_t rowBytes, Staging& st) {
  const size_t rows = rt.sendBegin[rt.group->nranks()];
  st.sendRows.resize(rows * rowBytes);
  st.sendWeights.resize(rows * rt.topk);
  packRows(rt, a, rowBytes, st.sendRows.data(), st.sendWeights.data());
}

}  // namespace

namespace {

// Expert-major: each received row into the slot of every local expert it is for, with its
// weight. forEachRow(land) calls land(j, row) for every received row j (flat order).
template <typename ForEachRow>
void landInSlots(Routing& rt, const DispatchArgs& args, ForEachRow forEachRow) {
  Staging& st = *rt.group->staging;
  const int K = rt.topk;
  rt.slotWeights.assign(rt.recvSlots(), 0.0f);
  const size_t payloadBytes = args.hidden * dtypeSize(rt.group->config.payload);
  // Slots past TRNCCL_STREAM_COPY_BYTES leave the caches before anyone reads them: streaming
  // stores skip reading the lines they overwrite (4 ranks, Zipf 1.2: dispatch 10-18% faster).
  const size_t streamFrom = rt.group->comm->streamingCopyBytes();
  const CopyKind kind = streamFrom > 0 && rt.recvSlots() * args.rowBytes >= streamFrom
                            ? CopyKind::kStreaming
                            : CopyKind::kCached;
  forEachRow([&](size_t j, const char* row) {
    for (int k = 0; k < K && rt.recvIds[j * K + k] >= 0; ++k) {
      const int64_t slot = rt.slotOf[j * K + k];
      landRow(args, payloadBytes, slot, row, kind);
      rt.slotWeights[slot] = st.recvWeights[j * K + k];
    }
  });
  if (args.outWeights)
    copyBytes(args.outWeights, rt.slotWeights.data(), rt.slotWeights.size() * sizeof(float));
}

}  // namespace

// Writes what the layout asks for once every row and weight is in: flat, the weights and ids
// beside the rows already in place; expert-major, each row into the slot of every local expert
// it is for (this rank's own rows straight from its tokens).
Status finishDispatch(Routing& rt, const DispatchArgs& args, size_t rowBytes,
                      const char* const* rowsFrom) {
  Staging& st = *rt.group->staging;
  const int me = rt.group->rank(), K = rt.topk;
  const size_t recvRows = rt.recvRows();
  if (rt.layout == trncclEpLayoutFlat) {
    if (args.outWeights)
      copyBytes(args.outWeights, st.recvWeights.data(), recvRows * K * sizeof(float));
    if (args.outIdx)
      for (size_t e = 0; e < recvRows * K; ++e) args.outIdx[e] = rt.recvIds[e];
    if (args.scaled && !args.landed) splitScales(rt, args);
    return Status::ok();
  }
  landInSlots(rt, args, [&](auto land) {
    for (int q = 0; q < rt.group->nranks(); ++q)
      for (size_t j = rt.recvBegin[q]; j < rt.recvBegin[q + 1]; ++j) {
        const size_t i = j - rt.recvBegin[q];
        land(j, q == me ? byteAt(args.tokens, rt.rowToken[rt.sendBegin[me] + i] * rowBytes)
                        : rowsFrom[q] + (i * rowBytes));
      }
  });
  return Status::ok();
}

Status finishDispatchRows(Routing& rt, const DispatchArgs& args, const char* const* rowOf) {
  landInSlots(rt, args, [&](auto land) {
    for (size_t j = 0; j < rt.recvRows(); ++j) land(j, rowOf[j]);
  });
  return Status::ok();
}

Status finishDispatch(Routing& rt, const DispatchArgs& args, size_t rowBytes) {
  Staging& st = *rt.group->staging;
  std::vector<const char*> rowsFrom(rt.group->nranks());
  for (size_t q = 0; q < rowsFrom.size(); ++q)
    rowsFrom[q] = st.recvRows.data() + (rt.recvBegin[q] * rowBytes);
  return finishDispatch(rt, args, rowBytes, rowsFrom.data());
}

namespace {

// The rows (and, unless they came already, the weights) between every pair of ranks, then
// finish. The expert side (recvBegin) is known.
void exchangeRows(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                  const DispatchArgs& a, size_t rowBytes, bool weightsToo) {
  const Routing& rt = *routing;
  Staging& st = *rt.group->staging;
  const int n = rt.group->nranks(), me = rt.group->rank(), K = rt.topk;
  const size_t recvRows = rt.recvRows();
  const bool flat = rt.layout == trncclEpLayoutFlat;
  // Rows arrive in the caller's output (flat) or in staging (expert-major); weights in
  // staging, from which finish() writes them in the layout's shape.
  st.recvRows.resize(flat ? 0 : recvRows * rowBytes);
  char* rowsInto = flat ? static_cast<char*>(a.outTokens) : st.recvRows.data();
  const size_t selfRows = rt.sendRows(me);
  if (flat)
    for (size_t i = 0; i < selfRows; ++i)
      copyBytes(byteAt(rowsInto, (rt.recvBegin[me] + i) * rowBytes),
                byteAt(a.tokens, rt.rowToken[rt.sendBegin[me] + i] * rowBytes), rowBytes);
  {
    ConcurrentSteps together(b);
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      if (rt.sendRows(q) > 0)
        b.send(q, st.sendRows.data() + (rt.sendBegin[q] * rowBytes), rt.sendRows(q) * rowBytes);
      if (rt.recvRowsFrom(q) > 0)
        b.recv(q, byteAt(rowsInto, rt.recvBegin[q] * rowBytes), rt.recvRowsFrom(q) * rowBytes);
    }
  }
  if (weightsToo) {
    st.recvWeights.resize(recvRows * K);
    copyBytes(st.recvWeights.data() + (rt.recvBegin[me] * K),
              st.sendWeights.data() + (rt.sendBegin[me] * K), selfRows * K * sizeof(float));
    ConcurrentSteps together(b);  // one message per peer and direction at a time
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      if (rt.sendRows(q) > 0)
        b.send(q, st.sendWeights.data() + (rt.sendBegin[q] * K),
               rt.sendRows(q) * K * sizeof(float));
      if (rt.recvRowsFrom(q) > 0)
        b.recv(q, st.recvWeights.data() + (rt.recvBegin[q] * K),
               rt.recvRowsFrom(q) * K * sizeof(float));
    }
  }
  DispatchArgs args = a;
  b.callback([routing, args, rowBytes](ScheduleBuilder&) {
    return finishDispatch(*routing, args, rowBytes);
  });
}

// Low latency: one fixed-size message per peer carries the row count, the rows' local ids and
// their weights (capacity: maxDispatchTokensPerRank rows); once all have arrived the expert
// side is known, and the rows follow.
size_t metaBytes(const Routing& rt) {
  return sizeof(uint64_t) +
         static_cast<size_t>(rt.group->config.maxDispatchTokens) * rt.topk * 2 * sizeof(int32_t);
}

void writeMeta(const Routing& rt, const Staging& st, int q, char* meta) {
  const int K = rt.topk;
  const uint64_t rows = rt.sendRows(q);
  copyBytes(meta, &rows, sizeof rows);
  char* ids = meta + sizeof rows;
  char* weights = ids + static_cast<size_t>(rt.group->config.maxDispatchTokens) * K * 4;
  copyBytes(ids, rt.sendIds.data() + (rt.sendBegin[q] * K), rows * K * sizeof(int32_t));
  copyBytes(weights, st.sendWeights.data() + (rt.sendBegin[q] * K), rows * K * sizeof(float));
}

Status readMeta(Routing& rt, Staging& st, size_t capacity) {
  const int n = rt.group->nranks(), K = rt.topk;
  const size_t bytes = metaBytes(rt);
  rt.recvBegin.assign(n + 1, 0);
  for (int q = 0; q < n; ++q) {
    uint64_t rows;
    copyBytes(&rows, st.metaIn.data() + (q * bytes), sizeof rows);
    if (rows > static_cast<uint64_t>(rt.group->config.maxDispatchTokens))
      return makeError(Code::kRemoteError,
                       "rank %d trncclEpDispatch (low latency): rank %d announced %llu rows, past "
                       "the capacity of %d per rank; its routing or configuration differs",
                       rt.group->rank(), q, static_cast<unsigned long long>(rows),
                       rt.group->config.maxDispatchTokens);
    rt.recvBegin[q + 1] = rt.recvBegin[q] + rows;
  }
  const size_t recvRows = rt.recvRows();
  rt.recvIds.resize(recvRows * K);
  st.recvWeights.resize(recvRows * K);
  for (int q = 0; q < n; ++q) {
    const char* ids = st.metaIn.data() + (q * bytes) + sizeof(uint64_t);
    const char* weights = ids + static_cast<size_t>(rt.group->config.maxDispatchTokens) * K * 4;
    const size_t rows = rt.recvRowsFrom(q);
    copyBytes(rt.recvIds.data() + (rt.recvBegin[q] * K), ids, rows * K * sizeof(int32_t));
    copyBytes(st.recvWeights.data() + (rt.recvBegin[q] * K), weights, rows * K * sizeof(float));
  }
  buildExpertSide(&rt);
  if (rt.received() > capacity)  // cannot happen: capacity is the worst case
    return makeError(Code::kInternalError,
                     "rank %d trncclEpDispatch (low latency): %zu rows/slots arrived, past the "
                     "worst case of %zu",
                     rt.group->rank(), rt.received(), capacity);
  return Status::ok();
}

Status planLowLatency(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                      const DispatchArgs& a, size_t rowBytes) {
  Routing& rt = *routing;
  Staging& st = *rt.group->staging;
  const int n = rt.group->nranks(), me = rt.group->rank();
  const size_t bytes = metaBytes(rt);
  st.metaOut.resize(n * bytes);
  st.metaIn.resize(n * bytes);
  for (int q = 0; q < n; ++q) writeMeta(rt, st, q, st.metaOut.data() + (q * bytes));
  copyBytes(st.metaIn.data() + (me * bytes), st.metaOut.data() + (me * bytes), bytes);
  {
    ConcurrentSteps together(b);
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      b.send(q, st.metaOut.data() + (q * bytes), bytes);
      b.recv(q, st.metaIn.data() + (q * bytes), bytes);
    }
  }
  DispatchArgs args = a;
  b.callback([routing, args, rowBytes](ScheduleBuilder& later) {
    TRNCCL_RETURN_IF_ERROR(readMeta(*routing, *routing->group->staging, args.outCapacity));
    exchangeRows(later, routing, args, rowBytes, /*weightsToo=*/false);
    return Status::ok();
  });
  return Status::ok();
}

}  // namespace

Status planDispatch(ScheduleBuilder& b, const std::shared_ptr<Routing>& routing,
                    const DispatchArgs& a) {
  const Routing& rt = *routing;
  const size_t payloadBytes = a.hidden * dtypeSize(rt.group->config.payload);
  DispatchArgs args = a;
  args.rowBytes = payloadBytes;
  if (a.scaled) args = withScales(rt, a, payloadBytes);
  if (rt.hierarchical) return planDispatchHierarchical(b, routing, args);
  if (rt.group->direct) return planDispatchDirect(b, routing, args);
  pack(rt, args, args.rowBytes, *rt.group->staging);
  if (rt.lowLatency) return planLowLatency(b, routing, args, args.rowBytes);
  exchangeRows(b, routing, args, args.rowBytes, /*weightsToo=*/true);
  return Status::ok();
}

}  // namespace trnccl::moe
