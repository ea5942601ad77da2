// alltoall_perf: nccl-tests compatible all-to-all benchmark (see perf/harness.hpp).
#include "perf/check_data.hpp"
#include "perf/harness.hpp"

namespace {

using trnccl::bench::PerfCall;

// size = a rank's whole buffer; count = elements to and from each peer.
void shape(size_t bytes, size_t esize, int n, size_t* count, size_t* sendElems, size_t* recvElems) {
  *count = bytes / (esize * n);
  *sendElems = *recvElems = *count * n;
}

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

void expected(const PerfCall& c, std::vector<char>& send, std::vector<char>& want) {
  size_t esize = trnccl::bench::elementBytes(c.dtype), block = c.count * esize;
  trnccl::bench::fillRank(c.dtype, trncclSum, c.rank, c.count * c.nranks, send.data());
  want.resize(block * c.nranks);
  std::vector<char> peer(block * c.nranks);
  for (int q = 0; q < c.nranks; ++q) {
    trnccl::bench::fillRank(c.dtype, trncclSum, q, c.count * c.nranks, peer.data());
    std::copy(peer.begin() + c.rank * block, peer.begin() + (c.rank + 1) * block,
              want.begin() + q * block);
  }
}

}  // namespace

int main(int argc, char** argv) {
  static const trnccl::bench::PerfCollective allToAll = {
      "alltoall", false,    false,          shape,    trnccl::bench::busFactorShared,
      run,        runAsync, inPlaceOffsets, expected, runMpi};
  return trnccl::bench::perfMain(argc, argv, allToAll);
}
