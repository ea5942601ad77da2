#include "transports/self/self_transport.hpp"

namespace trnccl {

Result<bool> SelfTransport::progressSend(TransferOp& op) {
  const char* src = static_cast<const char*>(op.src);
  queue_.emplace_back(src, src + op.bytes);
  op.done = op.bytes;
  op.started = true;
  return true;
}

Result<bool> SelfTransport::progressRecv(TransferOp& op) {
  if (queue_.empty()) return false;
  std::vector<char>& message = queue_.front();
  if (message.size() != op.bytes) {
    return makeError(Code::kInvalidUsage,
                     "rank %d expected a message of %zu bytes from itself but sent %zu bytes "
                     "(mismatched count or datatype between its send and receive)",
                     myRank_, op.bytes, message.size());
  }
  if (op.bytes) applyRecvAction(op, 0, message.data(), op.bytes);
  op.done = op.bytes;
  op.started = true;
  queue_.pop_front();
  return true;
}

}  // namespace trnccl
