/* A minimal C program: every rank adds its rank number into a vector.
 * Run it with: build/bench/trnccl-run -np 4 build/examples/allreduce_c
 * (trnccl-run hands each process its rank and the job's unique id, which trncclGetLaunchInfo
 * reads; a program started another way creates the id on rank 0 with trncclGetUniqueId and
 * sends it to the other ranks itself, e.g. with MPI_Bcast.) */
#include <stdio.h>
#include <stdlib.h>

#include <trnccl.h>

int main(void) {
  int rank, nranks;
  trncclUniqueId id;
  if (trncclGetLaunchInfo(&rank, &nranks, &id) != trncclSuccess) {
    fprintf(stderr, "%s\n", trncclGetLastError(NULL));
    return 2;
  }

  trncclComm_t comm;
  if (trncclCommInitRank(&comm, nranks, id, rank) != trncclSuccess) {
    fprintf(stderr, "rank %d: %s\n", rank, trncclGetLastError(NULL));
    return 1;
  }
  enum { kCount = 1 << 20 };
  float* data = malloc(kCount * sizeof(float));
  for (int i = 0; i < kCount; ++i) data[i] = (float)rank;
  trncclResult_t rc = trncclAllReduce(data, data, kCount, trncclFloat32, trncclSum, comm);
  if (rc != trncclSuccess) {
    fprintf(stderr, "rank %d: %s: %s\n", rank, trncclGetErrorString(rc), trncclGetLastError(comm));
    trncclCommAbort(comm);
    return 1;
  }
  float want = (float)(nranks * (nranks - 1) / 2);
  int ok = data[0] == want && data[kCount - 1] == want;
  printf("rank %d of %d: sum of ranks = %g (%s)\n", rank, nranks, data[0], ok ? "ok" : "WRONG");
  free(data);
  trncclCommDestroy(comm);
  return ok ? 0 : 1;
}
