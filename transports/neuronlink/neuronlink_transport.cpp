#include "transports/neuronlink/neuronlink_transport.hpp"

namespace trnccl::neuronlink {

NeuronLinkTransport::NeuronLinkTransport(Transport& carrier, int myRank,
                                         const topology::Topology& topology)
    : carrier_(carrier), myRank_(myRank), topology_(topology), linked_(topology.nranks(), 0) {
  for (int r = 0; r < topology.nranks(); ++r)
    linked_[r] = r != myRank && topology.nodeOf(r) == topology.nodeOf(myRank) &&
                 topology.linkBetween(myRank, r) != nullptr;
}

Status NeuronLinkTransport::unlinked(const TransferOp& op, const char* direction) const {
  return makeError(Code::kInternalError,
                   "neuronlink: rank %d %s rank %d, but their chips (%d and %d) are not linked "
                   "in %s; only linked chips talk over NeuronLink (this is a trnccl bug: the "
                   "transport was chosen for an unlinked pair)",
                   myRank_, direction, op.peer, topology_.chipOf(myRank_),
                   op.peer >= 0 && op.peer < topology_.nranks() ? topology_.chipOf(op.peer) : -1,
                   topology_.discovery().source.c_str());
}

Result<bool> NeuronLinkTransport::progressSend(TransferOp& op) {
  if (!op.started && (op.peer < 0 || op.peer >= topology_.nranks() || !linked_[op.peer]))
    return unlinked(op, "sends to");
  return carrier_.progressSend(op);
}

Result<bool> NeuronLinkTransport::progressRecv(TransferOp& op) {
  if (!op.started && (op.peer < 0 || op.peer >= topology_.nranks() || !linked_[op.peer]))
    return unlinked(op, "receives from");
  return carrier_.progressRecv(op);
}

}  // namespace trnccl::neuronlink
