// trncclMemAlloc / trncclMemFree: argument checks, then transports/shm/shared_alloc.hpp.
#include "api/handles.hpp"
#include "transports/shm/shared_alloc.hpp"

using trnccl::Code;
using trnccl::makeError;
using trnccl::api::report;

extern "C" {

trncclResult_t trncclMemAlloc(void** ptr, size_t size) {
  if (!ptr)
    return report(nullptr, makeError(Code::kInvalidArgument, "trncclMemAlloc: ptr is NULL"));
  *ptr = nullptr;
  if (size == 0)
    return report(nullptr, makeError(Code::kInvalidArgument, "trncclMemAlloc: size is 0"));
  auto allocated = trnccl::shm::sharedAlloc(size);
  if (!allocated.isOk()) return report(nullptr, allocated.status());
  *ptr = allocated.value();
  return trncclSuccess;
}

trncclResult_t trncclMemFree(void* ptr) {
  if (!ptr) return trncclSuccess;  // like free(NULL)
  return report(nullptr, trnccl::shm::sharedFree(ptr));
}

}  // extern "C"
