// Point-to-point send or receive: one message step. GroupEnd puts the steps of every send and
// receive of a group into one concurrent group, so rings of exchanges cannot deadlock.
#include "collectives/algorithm.hpp"

namespace trnccl {

Status sendRecvP2p(ScheduleBuilder& b, const CollArgs& a, const CommView&) {
  size_t bytes = a.count * elementSize(a);
  if (a.isSend)
    b.send(a.peer, a.sendbuff, bytes);
  else
    b.recv(a.peer, a.recvbuff, bytes);
  return Status::ok();
}

}  // namespace trnccl
