// How torch tensors and reduce ops map onto trnccl's buffers, types and ops, and the checks
// every call runs first (each failure is a sentence naming the call, the argument and why).
#pragma once

#include <ATen/core/Tensor.h>
#include <trnccl.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>
#include <vector>

namespace trnccl::torch_ext {

// Throws std::invalid_argument("trnccl: <sentence>"): pybind11 raises it as ValueError.
[[noreturn]] void failArgument(const std::string& sentence);

// A tensor's element type as trnccl sees it for data movement: types trnccl has map to
// themselves, bool to uint8 and every other type to bytes (count scaled by the element size).
struct MovedType {
  trncclDataType_t type;
  size_t elementsPerItem;  // trnccl elements per torch element
};
MovedType movedType(const at::Tensor& tensor);

// The type and op of a reduction, or a thrown error naming the call, the dtype and the op.
// bool reduces as uint8 (sum and max are "or", product and min are "and"); complex sums as
// pairs of reals.
struct Reduction {
  trncclDataType_t type;
  trncclRedOp_t op;
  size_t elementsPerItem;
};
Reduction reduction(const char* call, const at::Tensor& tensor, const c10d::ReduceOp& op);

// Throws unless tensor is a dense CPU tensor; `role` names it ("tensor", "output[2]").
void checkCpuDense(const char* call, const char* role, const at::Tensor& tensor);
// Throws unless tensors holds exactly `expected` tensors.
void checkCount(const char* call, const char* role, size_t actual, size_t expected);
// Throws unless every tensor has `like`'s dtype and number of elements.
void checkSameShape(const char* call, const char* role, const std::vector<at::Tensor>& tensors,
                    const at::Tensor& like);

std::string dtypeName(const at::Tensor& tensor);

// The tensor's data, or a valid dummy address for an empty tensor (trnccl refuses NULL).
void* dataOf(const at::Tensor& tensor);
// tensor itself when contiguous, else a contiguous copy.
at::Tensor contiguousOf(const at::Tensor& tensor);

}  // namespace trnccl::torch_ext
