// trncclCommDumpFlightRecorder: the flight recorder on demand (src/flight_recorder.hpp).
#include "api/handles.hpp"

using trnccl::Code;
using trnccl::makeError;
using trnccl::api::report;

extern "C" trncclResult_t trncclCommDumpFlightRecorder(trncclComm_t comm, const char* dir) {
  if (!comm)
    return report(nullptr,
                  makeError(Code::kInvalidArgument, "trncclCommDumpFlightRecorder: comm is NULL"));
  trnccl::api::CallGuard guard(comm);
  trnccl::Status status =
      comm->impl->dumpFlightRecorder(dir ? dir : "", "trncclCommDumpFlightRecorder");
  return report(comm, status.withContext("trncclCommDumpFlightRecorder: "));
}
