// alltoall_perf: nccl-tests compatible all-to-all benchmark (see perf/harness.hpp).
#include "perf/harness.hpp"

namespace {

using trnccl::bench::PerfCall;

trncclResult_t run(const PerfCall& c, const void* send, void* recv) {
  return trncclAllToAll(send, recv, c.count, c.dtype, c.comm);
}

trncclResult_t runAsync(const PerfCall& c, const void* send, void* recv, trncclRequest_t* request) {
  return trncclAllToAllAsync(send, recv, c.count, c.dtype, c.comm, request);
}

int runMpi(const PerfCall& c, const void* send, void* recv, MPI_Datatype type, MPI_Op) {
  int count = static_cast<int>(c.count);
  return MPI_Alltoall(send, count, type, recv, count, type, MPI_COMM_WORLD);
}

void inPlaceOffsets(const PerfCall&, size_t, size_t* send, size_t* recv) {
  *send = *recv = 0;
}

}  // namespace

int main(int argc, char** argv) {
  static const trnccl::bench::PerfCollective allToAll = {"alltoall",
                                                         false,
                                                         false,
                                                         trnccl::bench::blockPerPeerShape,
                                                         trnccl::bench::busFactorShared,
                                                         run,
                                                         runAsync,
                                                         inPlaceOffsets,
                                                         trnccl::bench::blockPerPeerExpected,
                                                         runMpi};
  return trnccl::bench::perfMain(argc, argv, allToAll);
}
