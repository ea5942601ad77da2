// The one place where internal Status codes become trncclResult_t, and the last-error texts.
#include <string>

#include "api/handles.hpp"
#include "core/log.hpp"

namespace trnccl::api {
namespace {
thread_local std::string threadLastError;
}

trncclResult_t toResult(Code code) {
  switch (code) {
    case Code::kOk: return trncclSuccess;
    case Code::kUnhandledSystemError: return trncclUnhandledSystemError;
    case Code::kSystemError: return trncclSystemError;
    case Code::kInternalError: return trncclInternalError;
    case Code::kInvalidArgument: return trncclInvalidArgument;
    case Code::kInvalidUsage: return trncclInvalidUsage;
    case Code::kRemoteError: return trncclRemoteError;
    case Code::kTimeout: return trncclTimeout;
    case Code::kAborted: return trncclAborted;
    case Code::kInProgress: return trncclInProgress;
  }
  return trncclInternalError;
}

trncclResult_t report(trncclComm_t comm, const Status& status) {
  if (status.isOk()) return trncclSuccess;
  threadLastError = status.message();
  if (comm && comm->impl) comm->impl->setLastError(status.message());
  TRNCCL_WARN(log::kAll, "%s", status.message().c_str());
  return toResult(status.code());
}

const char* threadError() {
  return threadLastError.c_str();
}

}  // namespace trnccl::api

extern "C" const char* trncclGetErrorString(trncclResult_t result) {
  switch (result) {
    case trncclSuccess: return "no error";
    case trncclUnhandledSystemError: return "unhandled system error";
    case trncclSystemError: return "system error (a system call failed)";
    case trncclInternalError: return "internal error (a bug in trnccl)";
    case trncclInvalidArgument: return "invalid argument";
    case trncclInvalidUsage: return "invalid usage (calls that do not match across ranks)";
    case trncclRemoteError: return "remote error (a peer rank failed or exited)";
    case trncclTimeout: return "timeout";
    case trncclAborted: return "aborted";
    case trncclInProgress: return "operation in progress";
    default: return "unknown result code";
  }
}

extern "C" const char* trncclGetLastError(trncclComm_t comm) {
  if (comm && comm->impl) {
    // The text must outlive the call: keep a per-thread copy.
    static thread_local std::string copy;
    copy = comm->impl->lastError();
    return copy.c_str();
  }
  return trnccl::api::threadError();
}
