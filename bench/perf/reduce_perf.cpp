// reduce_perf: nccl-tests compatible reduce benchmark (see perf/harness.hpp).
#include "perf/check_data.hpp"
#include "perf/harness.hpp"

namespace {

using trnccl::bench::PerfCall;

trncclResult_t run(const PerfCall& c, const void* send, void* recv) {
  return trncclReduce(send, recv, c.count, c.dtype, c.op, c.root, c.comm);
}

trncclResult_t runAsync(const PerfCall& c, const void* send, void* recv, trncclRequest_t* request) {
  return trncclReduceAsync(send, recv, c.count, c.dtype, c.op, c.root, c.comm, request);
}

int runMpi(const PerfCall& c, const void* send, void* recv, MPI_Datatype type, MPI_Op op) {
  return MPI_Reduce(send, recv, static_cast<int>(c.count), type, op, c.root, MPI_COMM_WORLD);
}

void inPlaceOffsets(const PerfCall&, size_t, size_t* send, size_t* recv) {
  *send = *recv = 0;
}

void expected(const PerfCall& c, std::vector<char>& send, std::vector<char>& want) {
  size_t esize = trnccl::bench::elementBytes(c.dtype);
  trnccl::bench::fillRank(c.dtype, c.op, c.rank, c.count, send.data());
  want.clear();  // only the root's buffer is defined
  if (c.rank != c.root) return;
  want.resize(c.count * esize);
  trnccl::bench::fillReduced(c.dtype, c.op, c.nranks, 0, c.count, want.data());
}

}  // namespace

int main(int argc, char** argv) {
  static const trnccl::bench::PerfCollective reduce = {"reduce",
                                                       true,
                                                       true,
                                                       trnccl::bench::wholeBufferShape,
                                                       trnccl::bench::busFactorOne,
                                                       run,
                                                       runAsync,
                                                       inPlaceOffsets,
                                                       expected,
                                                       runMpi};
  return trnccl::bench::perfMain(argc, argv, reduce);
}
