// The TokenSwitch entry points (trncclEp*): validate, then hand the work to the MoE engine
// (src/moe). Dispatch and combine are operations on the group's communicator, so they queue
// behind its other calls, time out and abort like them.
#include "api/handles.hpp"
#include "core/strformat.hpp"
#include "moe/ep_group.hpp"

using trnccl::Code;
using trnccl::makeError;
using trnccl::Status;
using trnccl::api::report;

struct trncclEpGroup {
  trncclComm_t comm;
  std::shared_ptr<trnccl::moe::EpGroup> impl;
};

struct trncclEpRouting {
  trncclComm_t comm;
  std::shared_ptr<trnccl::moe::Routing> impl;
};

namespace {

Status readConfig(const trncclEpConfig_t* config, trnccl::moe::EpConfig* out) {
  if (!config) return makeError(Code::kInvalidArgument, "trncclEpGroupCreate: config is NULL");
  if (config->size != sizeof(trncclEpConfig_t) || config->magic != TRNCCL_EP_CONFIG_MAGIC)
    return makeError(Code::kInvalidArgument,
                     "trncclEpGroupCreate: config was not set up with "
                     "TRNCCL_EP_CONFIG_INITIALIZER (size %zu, magic %#x)",
                     config->size, config->magic);
  if (config->version > TRNCCL_VERSION_CODE)
    return makeError(Code::kInvalidArgument,
                     "trncclEpGroupCreate: config version %u is newer than this library (%d)",
                     config->version, TRNCCL_VERSION_CODE);
  out->numExperts = config->numExperts;
  out->maxDispatchTokens = config->maxDispatchTokensPerRank;
  out->maxRecvTokens = config->maxRecvTokensPerRank;
  out->maxTokenBytes = config->maxTokenBytes;
  out->payload = config->payloadType;
  out->mode = config->mode;
  return Status::ok();
}

// Runs (blocking) or queues (request != nullptr) one planned engine call.
trncclResult_t submitPlan(trncclComm_t comm, trnccl::CollKind kind, std::string description,
                          trnccl::Communicator::PlanFn plan, trncclRequest_t* request,
                          const std::vector<const void*>& buffers) {
  trnccl::Communicator& impl = *comm->impl;
  if (!request)
    return report(comm, impl.runPlan(kind, std::move(description), std::move(plan), buffers));
  auto op = impl.enqueuePlan(kind, std::move(description), std::move(plan), buffers);
  if (!op.isOk()) return report(comm, op.status());
  *request = new trncclRequest{comm->impl, op.value()};
  return trncclSuccess;
}

// The caller's buffers a call uses (pinned while it is queued when in trncclMemAlloc memory).
std::vector<const void*> buffersOf(const trnccl::moe::DispatchArgs& a) {
  return {a.tokens, a.weights, a.outTokens, a.outWeights, a.outIdx, a.tokenScales, a.outScales};
}
std::vector<const void*> buffersOf(const trnccl::moe::CombineArgs& a) {
  return {a.expertTokens, a.out};
}

// Every dispatch and combine entry point: the routing and request checks, the call's own
// argument checks (before anything is queued), then run or queue its plan. prepare(impl) runs
// once the call is accepted and returns the plan.
template <typename Args, typename Check, typename Prepare>
trncclResult_t engineCall(const char* fn, trnccl::CollKind kind, trncclEpRouting_t routing,
                          const Args& args, trncclRequest_t* request, bool async, Check check,
                          const char* detailFormat, long detail, Prepare prepare) {
  if (!routing)
    return report(nullptr, makeError(Code::kInvalidArgument, "%s: routing is NULL", fn));
  trnccl::api::CallGuard guard(routing->comm);
  if (async && !request)
    return report(routing->comm, makeError(Code::kInvalidArgument, "%s: request is NULL", fn));
  Status status = check(*routing->impl, args);
  if (!status.isOk()) return report(routing->comm, status);
  std::string description =
      trnccl::strformat("%s(tokens=%zu, hidden=%zu, ", fn, routing->impl->numTokens, args.hidden) +
      trnccl::strformat(detailFormat, detail) + ")";
  return submitPlan(routing->comm, kind, std::move(description), prepare(routing->impl),
                    async ? request : nullptr, buffersOf(args));
}

trncclResult_t dispatch(trncclEpRouting_t routing, const trnccl::moe::DispatchArgs& args,
                        trncclRequest_t* request, bool async) {
  const char* fn = args.scaled ? (async ? "trncclEpDispatchScaledAsync" : "trncclEpDispatchScaled")
                               : (async ? "trncclEpDispatchAsync" : "trncclEpDispatch");
  return engineCall(fn, trnccl::CollKind::kMoeDispatch, routing, args, request, async,
                    trnccl::moe::checkDispatch, "topk=%ld",
                    routing ? static_cast<long>(routing->impl->topk) : 0L,
                    [&args](std::shared_ptr<trnccl::moe::Routing> impl) {
                      impl->dispatchQueued.store(true);  // a combine queued next may rely on it
                      return [impl, args](trnccl::ScheduleBuilder& b) {
                        return trnccl::moe::planDispatch(b, impl, args);
                      };
                    });
}

trncclResult_t combine(trncclEpRouting_t routing, const trnccl::moe::CombineArgs& args,
                       trncclRequest_t* request, bool async) {
  return engineCall(async ? "trncclEpCombineAsync" : "trncclEpCombine",
                    trnccl::CollKind::kMoeCombine, routing, args, request, async,
                    trnccl::moe::checkCombine, "weighted=%ld", static_cast<long>(args.weighted),
                    [&args](std::shared_ptr<trnccl::moe::Routing> impl) {
                      return [impl, args](trnccl::ScheduleBuilder& b) {
                        return trnccl::moe::planCombine(b, impl, args);
                      };
                    });
}

}  // namespace

extern "C" {

trncclResult_t trncclEpGroupCreate(trncclComm_t comm, const trncclEpConfig_t* config,
                                   trncclEpGroup_t* group) {
  if (!comm || !group)
    return report(nullptr,
                  makeError(Code::kInvalidArgument, "trncclEpGroupCreate: comm or group is NULL"));
  trnccl::api::CallGuard guard(comm);
  trnccl::moe::EpConfig parsed;
  Status status = readConfig(config, &parsed);
  if (!status.isOk()) return report(comm, status);
  auto created = trnccl::moe::createGroup(comm->impl, parsed);
  if (!created.isOk()) return report(comm, created.status());
  *group = new trncclEpGroup{comm, created.value()};
  return trncclSuccess;
}

trncclResult_t trncclEpGroupDestroy(trncclEpGroup_t group) {
  delete group;  // routings and queued calls keep what they use alive
  return trncclSuccess;
}

trncclResult_t trncclEpCreateRouting(trncclEpGroup_t group, const void* topkIdx,
                                     trncclDataType_t idxType, size_t numTokens, int topk,
                                     trncclEpLayout_t layout, trncclEpRouting_t* routing) {
  if (!group || !routing)
    return report(nullptr, makeError(Code::kInvalidArgument,
                                     "trncclEpCreateRouting: group or routing is NULL"));
  trnccl::api::CallGuard guard(group->comm);
  auto created = trnccl::moe::createRouting(group->impl, topkIdx, idxType, numTokens, topk, layout);
  if (!created.isOk()) return report(group->comm, created.status());
  *routing = new trncclEpRouting{group->comm, created.value()};
  return trncclSuccess;
}

trncclResult_t trncclEpRoutingGetCounts(trncclEpRouting_t routing, size_t* numRecv,
                                        int32_t* perExpertCounts, int capacity) {
  if (!routing)
    return report(nullptr,
                  makeError(Code::kInvalidArgument, "trncclEpRoutingGetCounts: routing is NULL"));
  const auto& rt = *routing->impl;
  const int L = rt.group->localExperts;
  if (perExpertCounts && capacity < L)
    return report(routing->comm,
                  makeError(Code::kInvalidArgument,
                            "rank %d trncclEpRoutingGetCounts: perExpertCounts holds %d entries "
                            "but this rank has %d local experts",
                            rt.group->rank(), capacity, L));
  if (!rt.expertSideReady)
    return report(routing->comm,
                  makeError(Code::kInvalidUsage,
                            "rank %d trncclEpRoutingGetCounts: in the low-latency mode the "
                            "counts arrive with the dispatch; call it after the first "
                            "trncclEpDispatch with this routing",
                            rt.group->rank()));
  if (numRecv) *numRecv = rt.received();
  if (perExpertCounts)
    for (int e = 0; e < L; ++e) perExpertCounts[e] = rt.perExpert[e];
  return trncclSuccess;
}

trncclResult_t trncclEpRoutingDestroy(trncclEpRouting_t routing) {
  delete routing;
  return trncclSuccess;
}

trncclResult_t trncclEpDispatch(trncclEpRouting_t routing, const void* tokens, size_t hidden,
                                const float* topkWeights, void* outTokens, float* outWeights,
                                int64_t* outTopkIdx, size_t outCapacity) {
  return dispatch(routing,
                  {tokens, hidden, topkWeights, outTokens, outWeights, outTopkIdx, outCapacity},
                  nullptr, false);
}

trncclResult_t trncclEpDispatchAsync(trncclEpRouting_t routing, const void* tokens, size_t hidden,
                                     const float* topkWeights, void* outTokens, float* outWeights,
                                     int64_t* outTopkIdx, size_t outCapacity,
                                     trncclRequest_t* request) {
  return dispatch(routing,
                  {tokens, hidden, topkWeights, outTokens, outWeights, outTopkIdx, outCapacity},
                  request, true);
}

trncclResult_t trncclEpDispatchScaled(trncclEpRouting_t routing, const void* tokens,
                                      const float* tokenScales, size_t hidden,
                                      const float* topkWeights, void* outTokens, float* outScales,
                                      float* outWeights, int64_t* outTopkIdx, size_t outCapacity) {
  trnccl::moe::DispatchArgs args{tokens,     hidden,     topkWeights, outTokens,
                                 outWeights, outTopkIdx, outCapacity};
  args.scaled = true;
  args.tokenScales = tokenScales;
  args.outScales = outScales;
  return dispatch(routing, args, nullptr, false);
}

trncclResult_t trncclEpDispatchScaledAsync(trncclEpRouting_t routing, const void* tokens,
                                           const float* tokenScales, size_t hidden,
                                           const float* topkWeights, void* outTokens,
                                           float* outScales, float* outWeights, int64_t* outTopkIdx,
                                           size_t outCapacity, trncclRequest_t* request) {
  trnccl::moe::DispatchArgs args{tokens,     hidden,     topkWeights, outTokens,
                                 outWeights, outTopkIdx, outCapacity};
  args.scaled = true;
  args.tokenScales = tokenScales;
  args.outScales = outScales;
  return dispatch(routing, args, request, true);
}

trncclResult_t trncclEpCombine(trncclEpRouting_t routing, const void* expertTokens, size_t hidden,
                               void* out, int weighted) {
  return combine(routing, {expertTokens, hidden, out, weighted != 0}, nullptr, false);
}

trncclResult_t trncclEpCombineAsync(trncclEpRouting_t routing, const void* expertTokens,
                                    size_t hidden, void* out, int weighted,
                                    trncclRequest_t* request) {
  return combine(routing, {expertTokens, hidden, out, weighted != 0}, request, true);
}

}  // extern "C"
