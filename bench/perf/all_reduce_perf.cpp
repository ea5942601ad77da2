// all_reduce_perf: nccl-tests compatible all-reduce benchmark (see perf/harness.hpp).
#include "perf/check_data.hpp"
#include "perf/harness.hpp"

namespace {

using trnccl::bench::PerfCall;

double busFactor(int n) {
  return n > 1 ? 2.0 * (n - 1) / n : 0.0;
}

trncclResult_t run(const PerfCall& c, const void* send, void* recv) {
  return trncclAllReduce(send, recv, c.count, c.dtype, c.op, c.comm);
}

void inPlaceOffsets(const PerfCall&, size_t, size_t* send, size_t* recv) {
  *send = *recv = 0;
}

trncclResult_t runAsync(const PerfCall& c, const void* send, void* recv, trncclRequest_t* request) {
  return trncclAllReduceAsync(send, recv, c.count, c.dtype, c.op, c.comm, request);
}

int runMpi(const PerfCall& c, const void* send, void* recv, MPI_Datatype type, MPI_Op op) {
  return MPI_Allreduce(send, recv, static_cast<int>(c.count), type, op, MPI_COMM_WORLD);
}

void expected(const PerfCall& c, std::vector<char>& send, std::vector<char>& want) {
  size_t esize = trnccl::bench::elementBytes(c.dtype);
  trnccl::bench::fillRank(c.dtype, c.op, c.rank, c.count, send.data());
  want.resize(c.count * esize);
  trnccl::bench::fillReduced(c.dtype, c.op, c.nranks, 0, c.count, want.data());
}

}  // namespace

int main(int argc, char** argv) {
  static const trnccl::bench::PerfCollective allReduce = {
      "all_reduce",   true,     false, trnccl::bench::wholeBufferShape, busFactor, run, runAsync,
      inPlaceOffsets, expected, runMpi};
  return trnccl::bench::perfMain(argc, argv, allReduce);
}
