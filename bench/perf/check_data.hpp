// Checkable data for the perf tools' -c mode: small integers, so every type and every
// reduction order represents every partial result exactly, and the expected result can be
// computed serially in double.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "trnccl.h"

namespace trnccl::bench {

// Value of element i on rank r, suited to op (products stay within +-2^8).
double checkValue(trncclDataType_t dtype, trncclRedOp_t op, int rank, size_t i);
void storeValue(trncclDataType_t dtype, void* at, double value);
// Serial reduction of the ranks' values at i, rounded as the library defines (avg: sum / n).
double reducedValue(trncclDataType_t dtype, trncclRedOp_t op, int nranks, size_t i);
void fillRank(trncclDataType_t dtype, trncclRedOp_t op, int rank, size_t count, char* out);
size_t elementBytes(trncclDataType_t dtype);
// out[i] = reducedValue(dtype, op, nranks, first + i) for i < count, stored as dtype.
void fillReduced(trncclDataType_t dtype, trncclRedOp_t op, int nranks, size_t first, size_t count,
                 char* out);

}  // namespace trnccl::bench
