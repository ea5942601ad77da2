// Reduction kernels built with the generic flags (see meson.build); body in reduce_kernels.inc.
#define TRNCCL_KERNEL_NS generic
#include "core/reduce_kernels.inc"
