// Every collective and point-to-point entry point: validate, then queue (and, for the
// blocking forms, wait) or hand the call to the open group.
#include "api/group.hpp"
#include "api/handles.hpp"
#include "api/validate.hpp"

using trnccl::Code;
using trnccl::CollArgs;
using trnccl::CollKind;
using trnccl::makeError;
using trnccl::api::report;

namespace {

// args by value: callers pass a temporary, which a group then takes over without a copy.
trncclResult_t submit(const char* fn, trncclComm_t comm, CollArgs args, trncclRequest_t* request,
                      bool async) {
  if (!comm) return report(nullptr, makeError(Code::kInvalidArgument, "%s: comm is NULL", fn));
  trnccl::api::CallGuard guard(comm);
  trnccl::Communicator& impl = *comm->impl;
  trnccl::Status status = trnccl::api::validateCall(fn, impl.rank(), impl.nranks(), args);
  if (!status.isOk()) return report(comm, status);
  if (async && !request)
    return report(
        comm, makeError(Code::kInvalidArgument, "rank %d %s: request is NULL", impl.rank(), fn));
  if (trnccl::api::groupActive()) {
    if (async)
      return report(comm, makeError(Code::kInvalidUsage,
                                    "rank %d %s: non-blocking calls "
                                    "cannot be queued in a group; use the blocking form "
                                    "between trncclGroupStart and trncclGroupEnd",
                                    impl.rank(), fn));
    trnccl::api::groupAdd(comm, std::move(args));
    return trncclSuccess;
  }
  if (!async) return report(comm, impl.run(args));
  auto op = impl.enqueue({args});
  if (!op.isOk()) return report(comm, op.status());
  *request = new trncclRequest{comm->impl, op.value()};
  return trncclSuccess;
}

CollArgs reduction(CollKind kind, const void* s, void* r, size_t count, trncclDataType_t t,
                   trncclRedOp_t op, int root) {
  CollArgs a;
  a.kind = kind;
  a.sendbuff = s;
  a.recvbuff = r;
  a.count = count;
  a.dtype = t;
  a.op = op;
  a.root = root;
  return a;
}

CollArgs movement(CollKind kind, const void* s, void* r, size_t count, trncclDataType_t t,
                  int root) {
  return reduction(kind, s, r, count, t, trncclSum, root);
}

CollArgs pointToPoint(bool isSend, const void* s, void* r, size_t count, trncclDataType_t t,
                      int peer) {
  CollArgs a = movement(CollKind::kSendRecv, s, r, count, t, -1);
  a.isSend = isSend;
  a.peer = peer;
  return a;
}

CollArgs allToAllv(trncclComm_t comm, const void* s, const size_t* sc, const size_t* sd, void* r,
                   const size_t* rc, const size_t* rd, trncclDataType_t t) {
  CollArgs a = movement(CollKind::kAllToAllv, s, r, 0, t, -1);
  int n = comm ? comm->impl->nranks() : 0;
  if (sc && sd && rc && rd) {
    a.sendcounts.assign(sc, sc + n);
    a.sdispls.assign(sd, sd + n);
    a.recvcounts.assign(rc, rc + n);
    a.rdispls.assign(rd, rd + n);
  }
  return a;
}

}  // namespace

extern "C" {

trncclResult_t trncclAllReduce(const void* s, void* r, size_t count, trncclDataType_t t,
                               trncclRedOp_t op, trncclComm_t comm) {
  return submit("trncclAllReduce", comm, reduction(CollKind::kAllReduce, s, r, count, t, op, -1),
                nullptr, false);
}
trncclResult_t trncclAllReduceAsync(const void* s, void* r, size_t count, trncclDataType_t t,
                                    trncclRedOp_t op, trncclComm_t comm, trncclRequest_t* request) {
  return submit("trncclAllReduceAsync", comm,
                reduction(CollKind::kAllReduce, s, r, count, t, op, -1), request, true);
}

trncclResult_t trncclAllGather(const void* s, void* r, size_t count, trncclDataType_t t,
                               trncclComm_t comm) {
  return submit("trncclAllGather", comm, movement(CollKind::kAllGather, s, r, count, t, -1),
                nullptr, false);
}
trncclResult_t trncclAllGatherAsync(const void* s, void* r, size_t count, trncclDataType_t t,
                                    trncclComm_t comm, trncclRequest_t* request) {
  return submit("trncclAllGatherAsync", comm, movement(CollKind::kAllGather, s, r, count, t, -1),
                request, true);
}

trncclResult_t trncclReduceScatter(const void* s, void* r, size_t count, trncclDataType_t t,
                                   trncclRedOp_t op, trncclComm_t comm) {
  return submit("trncclReduceScatter", comm,
                reduction(CollKind::kReduceScatter, s, r, count, t, op, -1), nullptr, false);
}
trncclResult_t trncclReduceScatterAsync(const void* s, void* r, size_t count, trncclDataType_t t,
                                        trncclRedOp_t op, trncclComm_t comm,
                                        trncclRequest_t* request) {
  return submit("trncclReduceScatterAsync", comm,
                reduction(CollKind::kReduceScatter, s, r, count, t, op, -1), request, true);
}

trncclResult_t trncclBroadcast(const void* s, void* r, size_t count, trncclDataType_t t, int root,
                               trncclComm_t comm) {
  return submit("trncclBroadcast", comm, movement(CollKind::kBroadcast, s, r, count, t, root),
                nullptr, false);
}
trncclResult_t trncclBroadcastAsync(const void* s, void* r, size_t count, trncclDataType_t t,
                                    int root, trncclComm_t comm, trncclRequest_t* request) {
  return submit("trncclBroadcastAsync", comm, movement(CollKind::kBroadcast, s, r, count, t, root),
                request, true);
}

trncclResult_t trncclReduce(const void* s, void* r, size_t count, trncclDataType_t t,
                            trncclRedOp_t op, int root, trncclComm_t comm) {
  return submit("trncclReduce", comm, reduction(CollKind::kReduce, s, r, count, t, op, root),
                nullptr, false);
}
trncclResult_t trncclReduceAsync(const void* s, void* r, size_t count, trncclDataType_t t,
                                 trncclRedOp_t op, int root, trncclComm_t comm,
                                 trncclRequest_t* request) {
  return submit("trncclReduceAsync", comm, reduction(CollKind::kReduce, s, r, count, t, op, root),
                request, true);
}

trncclResult_t trncclAllToAll(const void* s, void* r, size_t count, trncclDataType_t t,
                              trncclComm_t comm) {
  return submit("trncclAllToAll", comm, movement(CollKind::kAllToAll, s, r, count, t, -1), nullptr,
                false);
}
trncclResult_t trncclAllToAllAsync(const void* s, void* r, size_t count, trncclDataType_t t,
                                   trncclComm_t comm, trncclRequest_t* request) {
  return submit("trncclAllToAllAsync", comm, movement(CollKind::kAllToAll, s, r, count, t, -1),
                request, true);
}

trncclResult_t trncclAllToAllv(const void* s, const size_t sc[], const size_t sd[], void* r,
                               const size_t rc[], const size_t rd[], trncclDataType_t t,
                               trncclComm_t comm) {
  return submit("trncclAllToAllv", comm, allToAllv(comm, s, sc, sd, r, rc, rd, t), nullptr, false);
}
trncclResult_t trncclAllToAllvAsync(const void* s, const size_t sc[], const size_t sd[], void* r,
                                    const size_t rc[], const size_t rd[], trncclDataType_t t,
                                    trncclComm_t comm, trncclRequest_t* request) {
  return submit("trncclAllToAllvAsync", comm, allToAllv(comm, s, sc, sd, r, rc, rd, t), request,
                true);
}

trncclResult_t trncclSend(const void* s, size_t count, trncclDataType_t t, int peer,
                          trncclComm_t comm) {
  return submit("trncclSend", comm, pointToPoint(true, s, nullptr, count, t, peer), nullptr, false);
}
trncclResult_t trncclSendAsync(const void* s, size_t count, trncclDataType_t t, int peer,
                               trncclComm_t comm, trncclRequest_t* request) {
  return submit("trncclSendAsync", comm, pointToPoint(true, s, nullptr, count, t, peer), request,
                true);
}
trncclResult_t trncclRecv(void* r, size_t count, trncclDataType_t t, int peer, trncclComm_t comm) {
  return submit("trncclRecv", comm, pointToPoint(false, nullptr, r, count, t, peer), nullptr,
                false);
}
trncclResult_t trncclRecvAsync(void* r, size_t count, trncclDataType_t t, int peer,
                               trncclComm_t comm, trncclRequest_t* request) {
  return submit("trncclRecvAsync", comm, pointToPoint(false, nullptr, r, count, t, peer), request,
                true);
}

trncclResult_t trncclBarrier(trncclComm_t comm) {
  return submit("trncclBarrier", comm,
                movement(CollKind::kBarrier, nullptr, nullptr, 0, trncclUint8, -1), nullptr, false);
}
trncclResult_t trncclBarrierAsync(trncclComm_t comm, trncclRequest_t* request) {
  return submit("trncclBarrierAsync", comm,
                movement(CollKind::kBarrier, nullptr, nullptr, 0, trncclUint8, -1), request, true);
}

}  // extern "C"
