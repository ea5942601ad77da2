// Point-to-point messages between ranks of one node through the segment's SPSC rings.
#pragma once

#include <vector>

#include "transports/shm/segment.hpp"
#include "transports/transport.hpp"

namespace trnccl::shm {

class ShmTransport final : public Transport {
 public:
  // localOfRank maps a global rank to its local index (-1 for ranks on other nodes).
  ShmTransport(Segment& segment, int myRank, std::vector<int> localOfRank);
  const char* name() const override { return "shm"; }
  Result<bool> progressSend(TransferOp& op) override;
  Result<bool> progressRecv(TransferOp& op) override;

 private:
  Segment& segment_;
  int myRank_;
  int myLocal_;
  std::vector<int> localOfRank_;
  // Messages to/from one peer go strictly in order: the op that started first owns the ring.
  std::vector<const TransferOp*> activeSend_;
  std::vector<const TransferOp*> activeRecv_;
  // Per peer: the consumer's tail as last read; reread only when the ring looks full.
  std::vector<uint64_t> knownTail_;
};

}  // namespace trnccl::shm
