// Reduction kernels: dst = src[0] op src[1] op ... op src[n-1], applied in that order, so a
// fixed source order gives bit-identical results on every rank. fp16/bf16 accumulate in fp32
// and round once; avg divides the accumulated sum by avgDivisor before the final rounding.
// Kernels are compiled once per ISA (AVX-512, AVX2, baseline) and picked at run time.
#pragma once

#include <cstddef>

#include "trnccl.h"

namespace trnccl {

struct ReduceArgs {
  trncclDataType_t dtype;
  trncclRedOp_t op;
  void* dst;
  const void* const* srcs;
  int nsrcs;
  size_t count;
  // For trncclAvg: divide the sum by this (the number of ranks) when producing dst; 0 = the
  // partial result is stored as a plain sum (used by ring hops before the last one).
  int avgDivisor;
};

void reduce(const ReduceArgs& args);

// The MoE combine's weighted sums: (acc ? acc : 0) + weight * row, element by element in fp32
// (multiply, then add, each rounded: the same bits on every ISA), row in dtype (fp32, fp16 or
// bf16). The result goes to out in dtype (rounded once) when out is set, else to accOut in
// fp32 (which may be acc).
struct ScaleAddArgs {
  trncclDataType_t dtype;
  float weight;
  const void* row;
  const float* acc;  // nullptr: start from zero
  void* out;         // the result in dtype, or nullptr ...
  float* accOut;     // ... and then here, in fp32
  size_t count;
};

void scaleAdd(const ScaleAddArgs& args);

// Name of the kernel set chosen for this CPU ("avx512", "avx2", "generic").
const char* reduceKernelIsa();

}  // namespace trnccl
