// A rank's messages to itself: queued copies, delivered in order.
#pragma once

#include <deque>
#include <vector>

#include "transports/transport.hpp"

namespace trnccl {

class SelfTransport final : public Transport {
 public:
  explicit SelfTransport(int myRank) : myRank_(myRank) {}
  const char* name() const override { return "self"; }
  Result<bool> progressSend(TransferOp& op) override;
  Result<bool> progressRecv(TransferOp& op) override;

 private:
  int myRank_;
  std::deque<std::vector<char>> queue_;
};

}  // namespace trnccl
