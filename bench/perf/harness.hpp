// The nccl-tests compatible harness behind every *_perf tool: flags, the size sweep, timing
// (slowest rank), the table, the optional result check and JSON lines. A tool only describes
// its collective (a PerfCollective) and calls perfMain.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <mpi.h>

#include "trnccl.h"

namespace trnccl::bench {

struct PerfCall {
  trncclComm_t comm;
  int rank;
  int nranks;
  trncclDataType_t dtype;
  trncclRedOp_t op;
  int root;
  size_t count;  // the count argument of the C call
};

struct PerfCollective {
  const char* name;  // "all_reduce": tool name and JSON field
  bool usesOp;
  bool usesRoot;
  // Per-rank send/recv element counts and the C count argument for a size in bytes
  // (nccl-tests: the size column is the larger of the two buffers).
  void (*shape)(size_t bytes, size_t esize, int nranks, size_t* count, size_t* sendElems,
                size_t* recvElems);
  double (*busFactor)(int nranks);
  trncclResult_t (*run)(const PerfCall& call, const void* send, void* recv);
  trncclResult_t (*runAsync)(const PerfCall& call, const void* send, void* recv,
                             trncclRequest_t* request);
  // In-place calls use one buffer of max(send, recv) bytes; these are the byte offsets of the
  // send and receive buffers in it, as NCCL defines in-place for the collective. nullptr: the
  // collective has no in-place form (its in-place columns print N/A).
  void (*inPlaceOffsets)(const PerfCall& call, size_t esize, size_t* sendOffset,
                         size_t* recvOffset);
  // Fills this rank's send buffer with checkable values and computes what recv must hold.
  void (*expected)(const PerfCall& call, std::vector<char>& send, std::vector<char>& want);
  // The matching Open MPI call on the same buffers, for side-by-side runs (-M 1).
  int (*runMpi)(const PerfCall& call, const void* send, void* recv, MPI_Datatype type, MPI_Op op);
};

int perfMain(int argc, char** argv, const PerfCollective& collective);

// Shared pieces of the tools' descriptions.
// Send and receive buffers both hold the whole size (all-reduce, broadcast, reduce, sendrecv).
void wholeBufferShape(size_t bytes, size_t esize, int nranks, size_t* count, size_t* sendElems,
                      size_t* recvElems);
// A block of `count` elements to and from each peer; size = a rank's whole buffer (all-to-all,
// all-to-all-v with equal counts).
void blockPerPeerShape(size_t bytes, size_t esize, int nranks, size_t* count, size_t* sendElems,
                       size_t* recvElems);
// What such an exchange delivers: block `rank` of every peer's checkable send buffer, in peer
// order.
void blockPerPeerExpected(const PerfCall& call, std::vector<char>& send, std::vector<char>& want);
inline double busFactorOne(int) {
  return 1.0;
}
// Each rank moves (n-1)/n of the buffer (all-gather, reduce-scatter, all-to-all).
inline double busFactorShared(int n) {
  return static_cast<double>(n - 1) / n;
}

}  // namespace trnccl::bench
