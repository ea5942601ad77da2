#include "core/reduce.hpp"

#include "core/reduce_isa.hpp"

namespace trnccl {

std::vector<KernelVariant> supportedKernels() {
  __builtin_cpu_init();
  std::vector<KernelVariant> variants = {
      {"generic", kernels::generic::reduce, kernels::generic::scaleAdd}};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    variants.push_back({"avx2", kernels::avx2::reduce, kernels::avx2::scaleAdd});
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    variants.push_back({"avx512", kernels::avx512::reduce, kernels::avx512::scaleAdd});
  if (variants.back().fn == kernels::avx512::reduce && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bf16"))
    variants.push_back({"avx512bf16", kernels::avx512bf16::reduce, kernels::avx512bf16::scaleAdd});
  return variants;
}

namespace {

const KernelVariant& chosen() {
  static const KernelVariant best = supportedKernels().back();
  return best;
}

}  // namespace

void reduce(const ReduceArgs& args) {
  if (args.count == 0 || args.nsrcs <= 0) return;
  chosen().fn(args);
}

void scaleAdd(const ScaleAddArgs& args) {
  if (args.count == 0) return;
  chosen().scaleAdd(args);
}

const char* reduceKernelIsa() {
  return chosen().name;
}

}  // namespace trnccl
