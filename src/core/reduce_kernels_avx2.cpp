// Reduction kernels built with the avx2 flags (see meson.build); body in reduce_kernels.inc.
#define TRNCCL_KERNEL_NS avx2
#include "core/reduce_kernels.inc"
