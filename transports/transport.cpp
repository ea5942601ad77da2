#include "transports/transport.hpp"

#include <cstring>

#include "core/dtype.hpp"
#include "core/reduce.hpp"

namespace trnccl {

void applyRecvAction(const TransferOp& op, size_t offset, const void* fragment, size_t bytes) {
  char* dst = static_cast<char*>(op.dst) + offset;
  if (op.action.kind == RecvAction::Kind::kCopy) {
    copyBytes(dst, fragment, bytes, op.action.copy);
    return;
  }
  const void* srcs[2] = {fragment, static_cast<const char*>(op.action.local) + offset};
  size_t esize = dtypeSize(op.action.dtype);
  reduce({op.action.dtype, op.action.op, dst, srcs, 2, bytes / esize, op.action.avgDivisor});
}

}  // namespace trnccl
