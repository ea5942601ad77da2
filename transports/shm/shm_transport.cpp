#include "transports/shm/shm_transport.hpp"

#include <algorithm>
#include <atomic>

#include "core/copy.hpp"

namespace trnccl::shm {

ShmTransport::ShmTransport(Segment& segment, int myRank, std::vector<int> localOfRank)
    : segment_(segment),
      myRank_(myRank),
      localOfRank_(std::move(localOfRank)),
      activeSend_(localOfRank_.size(), nullptr),
      activeRecv_(localOfRank_.size(), nullptr),
      knownTail_(localOfRank_.size(), 0) {
  myLocal_ = localOfRank_[myRank];
}

Result<bool> ShmTransport::progressSend(TransferOp& op) {
  if (activeSend_[op.peer] && activeSend_[op.peer] != &op) return false;
  activeSend_[op.peer] = &op;
  const SegmentParams& p = segment_.params();
  int peerLocal = localOfRank_[op.peer];
  RingHeader* ring = segment_.ring(myLocal_, peerLocal);
  while (!op.started || op.done < op.bytes) {
    uint64_t head = ring->head.load(std::memory_order_relaxed);
    if (head - knownTail_[op.peer] >= p.ringSlots) {
      knownTail_[op.peer] = ring->tail.load(std::memory_order_acquire);
      if (head - knownTail_[op.peer] >= p.ringSlots) return false;
    }
    char* slot = segment_.ringSlot(myLocal_, peerLocal, head);
    size_t fragment = std::min<size_t>(p.ringSlotBytes, op.bytes - op.done);
    auto* header = reinterpret_cast<SlotHeader*>(slot);
    if (fragment) {
      copyBytes(Segment::slotPayload(slot, fragment), byteAt(op.src, op.done), fragment);
    }
    // The header line last and in one burst: the receiver is watching it, and every write to
    // it while the receiver holds a copy costs another transfer of the line.
    header->fragmentBytes = fragment;
    header->messageBytes = op.bytes;
    header->offset = op.done;
    header->sequence.store(head + 1, std::memory_order_release);
    ring->head.store(head + 1, std::memory_order_relaxed);
    segment_.wakeSleepers();
    op.done += fragment;
    op.started = true;
  }
  activeSend_[op.peer] = nullptr;
  return true;
}

Result<bool> ShmTransport::progressRecv(TransferOp& op) {
  if (activeRecv_[op.peer] && activeRecv_[op.peer] != &op) return false;
  activeRecv_[op.peer] = &op;
  int peerLocal = localOfRank_[op.peer];
  RingHeader* ring = segment_.ring(peerLocal, myLocal_);
  while (!op.started || op.done < op.bytes) {
    uint64_t tail = ring->tail.load(std::memory_order_relaxed);
    char* slot = segment_.ringSlot(peerLocal, myLocal_, tail);
    const auto* header = reinterpret_cast<const SlotHeader*>(slot);
    const uint64_t sequence = header->sequence.load(std::memory_order_acquire);
    if (sequence != tail + 1) {
      op.watchWord = &header->sequence;
      op.watchSeen = sequence;
      return false;
    }
    const uint64_t fragmentBytes = header->fragmentBytes;
    if (header->messageBytes != op.bytes) {
      activeRecv_[op.peer] = nullptr;
      return makeError(Code::kInvalidUsage,
                       "rank %d expected a message of %zu bytes from rank %d but rank %d sent "
                       "%llu bytes (mismatched count or datatype between the two calls)",
                       myRank_, op.bytes, op.peer, op.peer,
                       static_cast<unsigned long long>(header->messageBytes));
    }
    if (header->offset != op.done) {
      activeRecv_[op.peer] = nullptr;
      return makeError(Code::kInternalError,
                       "shm ring from rank %d out of order (offset %llu, "
                       "expected %zu)",
                       op.peer, static_cast<unsigned long long>(header->offset), op.done);
    }
    if (fragmentBytes)
      applyRecvAction(op, op.done, Segment::slotPayload(slot, fragmentBytes), fragmentBytes);
    op.done += fragmentBytes;
    op.started = true;
    ring->tail.store(tail + 1, std::memory_order_release);
    segment_.wakeSleepers();  // the sender may sleep on a full ring
  }
  activeRecv_[op.peer] = nullptr;
  op.watchWord = nullptr;
  return true;
}

}  // namespace trnccl::shm
