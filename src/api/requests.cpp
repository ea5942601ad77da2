// trncclTest and trncclWait on non-blocking requests.
#include "api/handles.hpp"

using trnccl::Code;
using trnccl::makeError;
using trnccl::api::report;
using trnccl::api::toResult;

namespace {

trncclResult_t complete(trncclRequest_t* request) {
  trnccl::Status result = (*request)->op->result;
  if (!result.isOk()) {
    (*request)->comm->setLastError(result.message());
    report(nullptr, result);
  }
  delete *request;
  *request = nullptr;
  return toResult(result.code());
}

}  // namespace

extern "C" trncclResult_t trncclTest(trncclRequest_t* request, int* done) {
  if (!request || !*request || !done)
    return report(nullptr, makeError(Code::kInvalidArgument,
                                     "trncclTest: request, *request or done is NULL"));
  *done = (*request)->comm->test((*request)->op) ? 1 : 0;
  return *done ? complete(request) : trncclSuccess;
}

extern "C" trncclResult_t trncclWait(trncclRequest_t* request, int64_t timeoutMs) {
  if (!request || !*request)
    return report(nullptr,
                  makeError(Code::kInvalidArgument, "trncclWait: request or *request is NULL"));
  if (timeoutMs < 0 && timeoutMs != TRNCCL_TIMEOUT_DEFAULT)
    return report(nullptr, makeError(Code::kInvalidArgument,
                                     "trncclWait: timeoutMs=%lld must be >= 0 or "
                                     "TRNCCL_TIMEOUT_DEFAULT",
                                     static_cast<long long>(timeoutMs)));
  double seconds = timeoutMs == TRNCCL_TIMEOUT_DEFAULT ? -1.0 : timeoutMs / 1000.0;
  trnccl::Status status = (*request)->comm->wait((*request)->op, seconds);
  if (status.code() == Code::kInProgress) {
    report(nullptr, status);
    return trncclTimeout;  // the request stays valid; wait again or test later
  }
  return complete(request);
}
