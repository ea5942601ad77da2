// broadcast_perf: nccl-tests compatible broadcast benchmark (see perf/harness.hpp).
#include "perf/check_data.hpp"
#include "perf/harness.hpp"

namespace {

using trnccl::bench::PerfCall;

trncclResult_t run(const PerfCall& c, const void* send, void* recv) {
  return trncclBroadcast(send, recv, c.count, c.dtype, c.root, c.comm);
}

trncclResult_t runAsync(const PerfCall& c, const void* send, void* recv, trncclRequest_t* request) {
  return trncclBroadcastAsync(send, recv, c.count, c.dtype, c.root, c.comm, request);
}

// MPI broadcasts in place; the root's data is in recv after trnccl's run.
int runMpi(const PerfCall& c, const void*, void* recv, MPI_Datatype type, MPI_Op) {
  return MPI_Bcast(recv, static_cast<int>(c.count), type, c.root, MPI_COMM_WORLD);
}

void inPlaceOffsets(const PerfCall&, size_t, size_t* send, size_t* recv) {
  *send = *recv = 0;
}

void expected(const PerfCall& c, std::vector<char>& send, std::vector<char>& want) {
  trnccl::bench::fillRank(c.dtype, trncclSum, c.rank, c.count, send.data());
  want.resize(send.size());
  trnccl::bench::fillRank(c.dtype, trncclSum, c.root, c.count, want.data());
}

}  // namespace

int main(int argc, char** argv) {
  static const trnccl::bench::PerfCollective broadcast = {"broadcast",
                                                          false,
                                                          true,
                                                          trnccl::bench::wholeBufferShape,
                                                          trnccl::bench::busFactorOne,
                                                          run,
                                                          runAsync,
                                                          inPlaceOffsets,
                                                          expected,
                                                          runMpi};
  return trnccl::bench::perfMain(argc, argv, broadcast);
}
