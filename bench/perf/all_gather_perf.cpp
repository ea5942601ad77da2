// all_gather_perf: nccl-tests compatible all-gather benchmark (see perf/harness.hpp).
#include "perf/check_data.hpp"
#include "perf/harness.hpp"

namespace {

using trnccl::bench::PerfCall;

// size = the gathered buffer; count = elements each rank contributes.
void shape(size_t bytes, size_t esize, int n, size_t* count, size_t* sendElems, size_t* recvElems) {
  *count = bytes / (esize * n);
  *sendElems = *count;
  *recvElems = *count * n;
}

trncclResult_t run(const PerfCall& c, const void* send, void* recv) {
  return trncclAllGather(send, recv, c.count, c.dtype, c.comm);
}

trncclResult_t runAsync(const PerfCall& c, const void* send, void* recv, trncclRequest_t* request) {
  return trncclAllGatherAsync(send, recv, c.count, c.dtype, c.comm, request);
}

int runMpi(const PerfCall& c, const void* send, void* recv, MPI_Datatype type, MPI_Op) {
  int count = static_cast<int>(c.count);
  return MPI_Allgather(send, count, type, recv, count, type, MPI_COMM_WORLD);
}

void inPlaceOffsets(const PerfCall& c, size_t esize, size_t* send, size_t* recv) {
  *send = c.rank * c.count * esize;  // this rank's block of the output
  *recv = 0;
}

void expected(const PerfCall& c, std::vector<char>& send, std::vector<char>& want) {
  size_t esize = trnccl::bench::elementBytes(c.dtype);
  trnccl::bench::fillRank(c.dtype, trncclSum, c.rank, c.count, send.data());
  want.resize(c.count * c.nranks * esize);
  for (int q = 0; q < c.nranks; ++q)
    trnccl::bench::fillRank(c.dtype, trncclSum, q, c.count, want.data() + q * c.count * esize);
}

}  // namespace

int main(int argc, char** argv) {
  static const trnccl::bench::PerfCollective allGather = {
      "all_gather", false,    false,          shape,    trnccl::bench::busFactorShared,
      run,          runAsync, inPlaceOffsets, expected, runMpi};
  return trnccl::bench::perfMain(argc, argv, allGather);
}
