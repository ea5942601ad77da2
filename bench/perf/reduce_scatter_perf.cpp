// reduce_scatter_perf: nccl-tests compatible reduce-scatter benchmark (see perf/harness.hpp).
#include "perf/check_data.hpp"
#include "perf/harness.hpp"

namespace {

using trnccl::bench::PerfCall;

// size = the whole input; count = elements each rank receives.
void shape(size_t bytes, size_t esize, int n, size_t* count, size_t* sendElems, size_t* recvElems) {
  *count = bytes / (esize * n);
  *sendElems = *count * n;
  *recvElems = *count;
}

trncclResult_t run(const PerfCall& c, const void* send, void* recv) {
  return trncclReduceScatter(send, recv, c.count, c.dtype, c.op, c.comm);
}

trncclResult_t runAsync(const PerfCall& c, const void* send, void* recv, trncclRequest_t* request) {
  return trncclReduceScatterAsync(send, recv, c.count, c.dtype, c.op, c.comm, request);
}

int runMpi(const PerfCall& c, const void* send, void* recv, MPI_Datatype type, MPI_Op op) {
  return MPI_Reduce_scatter_block(send, recv, static_cast<int>(c.count), type, op, MPI_COMM_WORLD);
}

void inPlaceOffsets(const PerfCall& c, size_t esize, size_t* send, size_t* recv) {
  *send = 0;
  *recv = c.rank * c.count * esize;  // this rank's block of the input
}

void expected(const PerfCall& c, std::vector<char>& send, std::vector<char>& want) {
  size_t esize = trnccl::bench::elementBytes(c.dtype);
  trnccl::bench::fillRank(c.dtype, c.op, c.rank, c.count * c.nranks, send.data());
  want.resize(c.count * esize);
  trnccl::bench::fillReduced(c.dtype, c.op, c.nranks, c.rank * c.count, c.count, want.data());
}

}  // namespace

int main(int argc, char** argv) {
  static const trnccl::bench::PerfCollective reduceScatter = {
      "reduce_scatter", true,           false,    shape, trnccl::bench::busFactorShared, run,
      runAsync,         inPlaceOffsets, expected, runMpi};
  return trnccl::bench::perfMain(argc, argv, reduceScatter);
}
