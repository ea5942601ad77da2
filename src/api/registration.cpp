// trncclCommRegister / trncclCommDeregister: argument checks, then comm.hpp.
#include "api/handles.hpp"

using trnccl::Code;
using trnccl::makeError;
using trnccl::api::report;

extern "C" {

trncclResult_t trncclCommRegister(const trncclComm_t comm, void* buff, size_t size, void** handle) {
  if (!comm)
    return report(nullptr, makeError(Code::kInvalidArgument, "trncclCommRegister: comm is NULL"));
  if (handle) *handle = nullptr;
  const int rank = comm->impl->rank();
  if (!buff || !handle || size == 0)
    return report(comm, makeError(Code::kInvalidArgument,
                                  "rank %d trncclCommRegister(buff=%p, size=%zu, handle=%p): "
                                  "the buffer and the handle pointer must be non-NULL and the "
                                  "size positive",
                                  rank, buff, size, static_cast<void*>(handle)));
  trnccl::api::CallGuard guard(comm);
  auto registration = comm->impl->registerBuffer(buff, size);
  if (!registration.isOk())
    return report(comm, registration.status().withContext("trncclCommRegister: "));
  *handle = registration.value();
  return trncclSuccess;
}

trncclResult_t trncclCommDeregister(const trncclComm_t comm, void* handle) {
  if (!comm)
    return report(nullptr, makeError(Code::kInvalidArgument, "trncclCommDeregister: comm is NULL"));
  if (!handle)
    return report(comm,
                  makeError(Code::kInvalidArgument, "rank %d trncclCommDeregister: handle is NULL",
                            comm->impl->rank()));
  trnccl::api::CallGuard guard(comm);
  return report(
      comm, comm->impl->deregisterBuffer(static_cast<trnccl::Communicator::Registration*>(handle))
                .withContext("trncclCommDeregister: "));
}

}  // extern "C"
