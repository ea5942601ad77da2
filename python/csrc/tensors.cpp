#include "tensors.hpp"

#include <c10/util/Exception.h>

#include <stdexcept>

namespace trnccl::torch_ext {

void failArgument(const std::string& sentence) {
  throw std::invalid_argument("trnccl: " + sentence);
}

namespace {

bool hasNativeType(at::ScalarType type, trncclDataType_t* out) {
  switch (type) {
    case at::kFloat: *out = trncclFloat32; return true;
    case at::kDouble: *out = trncclFloat64; return true;
    case at::kHalf: *out = trncclFloat16; return true;
    case at::kBFloat16: *out = trncclBfloat16; return true;
    case at::kChar: *out = trncclInt8; return true;
    case at::kByte: *out = trncclUint8; return true;
    case at::kInt: *out = trncclInt32; return true;
    case at::kLong: *out = trncclInt64; return true;
    case at::kBool: *out = trncclUint8; return true;
    default: return false;
  }
}

const char* opName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "an unknown op";
  }
}

}  // namespace

std::string dtypeName(const at::Tensor& tensor) {
  // torch's Python names (c10's are C++ names: Short, Float, ...).
  switch (tensor.scalar_type()) {
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::kShort: return "torch.int16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kBool: return "torch.bool";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    case at::kComplexHalf: return "torch.complex32";
    default: return std::string("torch ") + c10::toString(tensor.scalar_type());
  }
}

void* dataOf(const at::Tensor& tensor) {
  static char empty[64];
  return tensor.numel() == 0 ? static_cast<void*>(empty) : tensor.data_ptr();
}

at::Tensor contiguousOf(const at::Tensor& tensor) {
  return tensor.contiguous();
}

MovedType movedType(const at::Tensor& tensor) {
  trncclDataType_t type;
  if (hasNativeType(tensor.scalar_type(), &type)) return {type, 1};
  return {trncclUint8, static_cast<size_t>(tensor.element_size())};
}

Reduction reduction(const char* call, const at::Tensor& tensor, const c10d::ReduceOp& reduceOp) {
  const auto op = reduceOp.op_;
  trncclRedOp_t trncclOp;
  switch (op) {
    case c10d::ReduceOp::SUM: trncclOp = trncclSum; break;
    case c10d::ReduceOp::AVG: trncclOp = trncclAvg; break;
    case c10d::ReduceOp::PRODUCT: trncclOp = trncclProd; break;
    case c10d::ReduceOp::MIN: trncclOp = trncclMin; break;
    case c10d::ReduceOp::MAX: trncclOp = trncclMax; break;
    default:
      failArgument(std::string(call) + ": ReduceOp." + opName(op) +
                   " is not supported (trnccl reduces with SUM, PRODUCT, MIN, MAX and AVG)");
  }
  const at::ScalarType scalar = tensor.scalar_type();
  if (scalar == at::kBool) {
    if (op == c10d::ReduceOp::AVG) failArgument(std::string(call) + ": ReduceOp.AVG of torch.bool");
    const bool isOr = op == c10d::ReduceOp::SUM || op == c10d::ReduceOp::MAX;
    return {trncclUint8, isOr ? trncclMax : trncclMin, 1};
  }
  if (scalar == at::kComplexFloat || scalar == at::kComplexDouble) {
    if (op != c10d::ReduceOp::SUM && op != c10d::ReduceOp::AVG)
      failArgument(std::string(call) + ": ReduceOp." + opName(op) + " of " + dtypeName(tensor) +
                   " (complex tensors reduce with SUM and AVG only)");
    return {scalar == at::kComplexFloat ? trncclFloat32 : trncclFloat64, trncclOp, 2};
  }
  trncclDataType_t type;
  if (!hasNativeType(scalar, &type))
    failArgument(
        std::string(call) + ": " + dtypeName(tensor) +
        " cannot be reduced by trnccl (reductions take float32, float64, float16, bfloat16, "
        "int8, uint8, int32, int64, bool and complex); data movement takes every dtype");
  return {type, trncclOp, 1};
}

void checkCpuDense(const char* call, const char* role, const at::Tensor& tensor) {
  if (!tensor.defined()) failArgument(std::string(call) + ": " + role + " is an undefined tensor");
  if (!tensor.device().is_cpu())
    failArgument(std::string(call) + ": " + role + " is on " + tensor.device().str() +
                 "; the trnccl process group moves CPU tensors (copy it with .cpu())");
  if (tensor.layout() != c10::kStrided)
    failArgument(std::string(call) + ": " + role +
                 " is a sparse or non-strided tensor; trnccl takes "
                 "dense tensors (call .to_dense())");
}

void checkCount(const char* call, const char* role, size_t actual, size_t expected) {
  if (actual != expected)
    failArgument(std::string(call) + ": expected " + std::to_string(expected) + " " + role +
                 ", got " + std::to_string(actual));
}

void checkSameShape(const char* call, const char* role, const std::vector<at::Tensor>& tensors,
                    const at::Tensor& like) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = std::string(role) + "[" + std::to_string(i) + "]";
    checkCpuDense(call, name.c_str(), tensors[i]);
    if (tensors[i].scalar_type() != like.scalar_type())
      failArgument(std::string(call) + ": " + name + " is " + dtypeName(tensors[i]) +
                   " but the input is " + dtypeName(like));
    if (tensors[i].numel() != like.numel())
      failArgument(std::string(call) + ": " + name + " has " + std::to_string(tensors[i].numel()) +
                   " elements but the input has " + std::to_string(like.numel()));
  }
}

}  // namespace trnccl::torch_ext
