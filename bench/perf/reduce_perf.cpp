// reduce_perf: nccl-tests compatible reduce benchmark (see perf/harness.hpp).
#include "perf/check_data.hpp"
#include "perf/harness.hpp"

namespace {

using trnccl::bench::PerfCall;

void shape(size_t bytes, size_t esize, int, size_t* count, size_t* sendElems, size_t* recvElems) {
  *count = *sendElems = *recvElems = bytes / esize;
}

double busFactor(int) {
  return 1.0;
}

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
  for (size_t i = 0; i < c.count; ++i)
    trnccl::bench::storeValue(c.dtype, want.data() + i * esize,
                              trnccl::bench::reducedValue(c.dtype, c.op, c.nranks, i));
}

}  // namespace

int main(int argc, char** argv) {
  static const trnccl::bench::PerfCollective reduce = {
      "reduce", true, true, shape, busFactor, run, runAsync, inPlaceOffsets, expected, runMpi};
  return trnccl::bench::perfMain(argc, argv, reduce);
}
