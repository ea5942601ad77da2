/* A minimal C program: every rank adds its rank number into a vector.
 * Run it with: build/bench/trnccl-run -np 4 build/examples/allreduce_c
 * (trnccl-run hands each process TRNCCL_RANK, TRNCCL_NRANKS and TRNCCL_UNIQUE_ID; a program
 * started another way would create the id on rank 0 with trncclGetUniqueId and send it to
 * the other ranks itself, e.g. with MPI_Bcast.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <trnccl.h>

static int hexValue(char c) {
  return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}

int main(void) {
  const char* rankText = getenv("TRNCCL_RANK");
  const char* sizeText = getenv("TRNCCL_NRANKS");
  const char* idText = getenv("TRNCCL_UNIQUE_ID");
  if (!rankText || !sizeText || !idText || strlen(idText) != 2 * TRNCCL_UNIQUE_ID_BYTES) {
    fprintf(stderr, "start me with: trnccl-run -np N allreduce_c\n");
    return 2;
  }
  int rank = atoi(rankText), nranks = atoi(sizeText);
  trncclUniqueId id;
  for (int i = 0; i < TRNCCL_UNIQUE_ID_BYTES; ++i)
    id.internal[i] = (char)(hexValue(idText[2 * i]) * 16 + hexValue(idText[2 * i + 1]));

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
