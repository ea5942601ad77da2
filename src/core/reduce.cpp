#include "core/reduce.hpp"

namespace trnccl {
namespace kernels {
namespace generic { void reduce(const ReduceArgs& args); }
namespace avx2 { void reduce(const ReduceArgs& args); }
namespace avx512 { void reduce(const ReduceArgs& args); }
}  // namespace kernels

namespace {

using KernelFn = void (*)(const ReduceArgs&);

struct KernelChoice {
  KernelFn fn;
  const char* name;
};

KernelChoice choose() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    return {kernels::avx512::reduce, "avx512"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return {kernels::avx2::reduce, "avx2"};
  return {kernels::generic::reduce, "generic"};
}

const KernelChoice& chosen() {
  static const KernelChoice choice = choose();
  return choice;
}

}  // namespace

void reduce(const ReduceArgs& args) {
  if (args.count == 0 || args.nsrcs <= 0) return;
  chosen().fn(args);
}

const char* reduceKernelIsa() { return chosen().name; }

}  // namespace trnccl
