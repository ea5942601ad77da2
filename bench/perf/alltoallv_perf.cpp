// alltoallv_perf: all-to-all through the v interface (trncclAllToAllv with equal counts and
// packed displacements, MPI_Alltoallv beside it with -M 1): what the counts exchange and the
// v schedules cost over the uniform all-to-all (alltoall_perf) at the same sizes. No in-place
// form (trncclAllToAllv refuses it). See perf/harness.hpp.
#include <vector>

#include "perf/harness.hpp"

namespace {

using trnccl::bench::PerfCall;

// Equal counts, packed displacements; rebuilt only when the call's shape changes.
struct Layout {
  size_t count = SIZE_MAX;
  int nranks = 0;
  std::vector<size_t> counts, displs;
  std::vector<int> mpiCounts, mpiDispls;
  const Layout& of(const PerfCall& c) {
    if (c.count == count && c.nranks == nranks) return *this;
    count = c.count, nranks = c.nranks;
    counts.assign(nranks, count);
    displs.resize(nranks);
    mpiCounts.assign(nranks, static_cast<int>(count));
    mpiDispls.resize(nranks);
    for (int q = 0; q < nranks; ++q) {
      displs[q] = q * count;
      mpiDispls[q] = static_cast<int>(q * count);
    }
    return *this;
  }
};
thread_local Layout layout;

trncclResult_t run(const PerfCall& c, const void* send, void* recv) {
  const Layout& l = layout.of(c);
  return trncclAllToAllv(send, l.counts.data(), l.displs.data(), recv, l.counts.data(),
                         l.displs.data(), c.dtype, c.comm);
}

trncclResult_t runAsync(const PerfCall& c, const void* send, void* recv, trncclRequest_t* request) {
  const Layout& l = layout.of(c);
  return trncclAllToAllvAsync(send, l.counts.data(), l.displs.data(), recv, l.counts.data(),
                              l.displs.data(), c.dtype, c.comm, request);
}

int runMpi(const PerfCall& c, const void* send, void* recv, MPI_Datatype type, MPI_Op) {
  const Layout& l = layout.of(c);
  return MPI_Alltoallv(send, l.mpiCounts.data(), l.mpiDispls.data(), type, recv, l.mpiCounts.data(),
                       l.mpiDispls.data(), type, MPI_COMM_WORLD);
}

}  // namespace

int main(int argc, char** argv) {
  static const trnccl::bench::PerfCollective allToAllv = {"alltoallv",
                                                          false,
                                                          false,
                                                          trnccl::bench::blockPerPeerShape,
                                                          trnccl::bench::busFactorShared,
                                                          run,
                                                          runAsync,
                                                          nullptr,
                                                          trnccl::bench::blockPerPeerExpected,
                                                          runMpi};
  return trnccl::bench::perfMain(argc, argv, allToAllv);
}
