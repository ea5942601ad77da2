// Ring reduce-scatter: at step t a rank forwards its partial sum of the block of the rank t+1
// places before it in the ring and receives its predecessor's partial of the block t+2 places
// before, adding its own input as the fragments land. Two scratch blocks alternate; the last
// step lands in the output. The input is never written. The ring goes in the communicator's
// ring order (along NeuronLinks inside a node that has them).
#include "collectives/direct_rounds.hpp"

namespace trnccl {

Status reduceScatterRing(ScheduleBuilder& b, const CollArgs& a, const CommView& c) {
  const size_t blockBytes = a.count * elementSize(a);
  const RingGroup& g = c.ring;
  const int n = g.size();
  auto input = [&](int position) { return byteAt(a.sendbuff, g.at(position) * blockBytes); };
  if (n == 1) {
    b.copy(a.recvbuff, input(0), blockBytes);
    return Status::ok();
  }
  char* scratch = b.scratch(2 * blockBytes);
  char* partial[2] = {scratch, scratch + blockBytes};
  for (int t = 0; t < n - 1; ++t) {
    const int sendBlock = g.pos - t - 1, recvBlock = g.pos - t - 2;
    bool last = t == n - 2;
    void* dst = last ? a.recvbuff : partial[t % 2];
    ConcurrentSteps together(b);
    b.send(g.next(), t == 0 ? input(sendBlock) : partial[(t - 1) % 2], blockBytes);
    RecvAction reduce{RecvAction::Kind::kReduce, a.dtype, a.op, input(recvBlock),
                      (last && a.op == trncclAvg) ? n : 0};
    b.recv(g.prev(), dst, blockBytes, reduce);
  }
  return Status::ok();
}

}  // namespace trnccl
