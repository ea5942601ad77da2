// Reduction kernels built with the avx512bf16 flags (see meson.build); body in
// reduce_kernels.inc.
#define TRNCCL_KERNEL_NS avx512bf16
#include "core/reduce_kernels.inc"
