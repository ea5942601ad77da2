// The reduction kernel variants compiled into the library (one per instruction set), and
// which of them this CPU can run. core/reduce.cpp picks the best; the unit tests run them all.
#pragma once

#include <vector>

#include "core/reduce.hpp"

namespace trnccl {
namespace kernels {
namespace generic {
void reduce(const ReduceArgs& args);
void scaleAdd(const ScaleAddArgs& args);
}  // namespace generic
namespace avx2 {
void reduce(const ReduceArgs& args);
void scaleAdd(const ScaleAddArgs& args);
}  // namespace avx2
namespace avx512 {
void reduce(const ReduceArgs& args);
void scaleAdd(const ScaleAddArgs& args);
}  // namespace avx512
namespace avx512bf16 {
void reduce(const ReduceArgs& args);
void scaleAdd(const ScaleAddArgs& args);
}  // namespace avx512bf16
}  // namespace kernels

struct KernelVariant {
  const char* name;
  void (*fn)(const ReduceArgs&);
  void (*scaleAdd)(const ScaleAddArgs&);
};

// Variants this CPU supports, slowest first.
std::vector<KernelVariant> supportedKernels();

}  // namespace trnccl
