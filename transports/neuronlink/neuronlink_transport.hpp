// NeuronLink: the device-to-device links between Trainium chips of a node. On machines
// without Neuron devices (every development and CI machine) it runs in emulation: messages
// travel through the node's shared-memory rings, exactly as the shm transport moves them, but
// only between ranks whose chips the topology links. What is emulated is the link graph (who
// may talk directly, and which links carry what), not the hardware's speed or its DMA engines.
// A message to a rank whose chip is not linked is an internal error: the communicator chooses
// this transport only for linked pairs, so reaching it otherwise is a bug, never a silent
// detour over host memory.
#pragma once

#include <vector>

#include "topology/topology.hpp"
#include "transports/transport.hpp"

namespace trnccl::neuronlink {

class NeuronLinkTransport final : public Transport {
 public:
  // carrier: the node's shared-memory transport that moves the bytes in emulation.
  NeuronLinkTransport(Transport& carrier, int myRank, const topology::Topology& topology);
  const char* name() const override { return "neuronlink"; }
  Result<bool> progressSend(TransferOp& op) override;
  Result<bool> progressRecv(TransferOp& op) override;

 private:
  Status unlinked(const TransferOp& op, const char* direction) const;

  Transport& carrier_;
  int myRank_;
  const topology::Topology& topology_;
  std::vector<char> linked_;  // by peer rank
};

}  // namespace trnccl::neuronlink
