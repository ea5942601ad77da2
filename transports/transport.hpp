// The internal Transport interface. A transport moves whole messages between two ranks as a
// series of fragments, never blocking: the progress engine calls progressSend/progressRecv
// until they report completion, and does all waiting (with timeouts) itself. Messages between
// an ordered pair of ranks are delivered in the order their sends were started.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/copy.hpp"
#include "core/status.hpp"
#include "trnccl.h"

namespace trnccl {

// What a receiver does with each arriving fragment.
struct RecvAction {
  enum class Kind { kCopy, kReduce };
  Kind kind = Kind::kCopy;
  // kReduce: dst[off..] = reduce(fragment, local[off..]) (local may equal dst).
  trncclDataType_t dtype = trncclUint8;
  trncclRedOp_t op = trncclSum;
  const void* local = nullptr;
  int avgDivisor = 0;
  // kCopy: how fragments are written into dst (streaming for large calls, core/copy.hpp).
  CopyKind copy = CopyKind::kCached;
};

struct TransferOp {
  int peer = -1;
  size_t bytes = 0;           // the whole message
  const void* src = nullptr;  // send side
  void* dst = nullptr;        // receive side
  RecvAction action;          // receive side
  // Progress state, owned by the transport.
  size_t done = 0;
  bool started = false;
  void* transportState = nullptr;  // a network transport's per-message record (heap, stable)
  // Set by a transport whose pending receive waits for one shared word to change (shm: the
  // next slot's sequence), so that a blocked caller watches that word instead of rerunning
  // whole progress passes. nullptr: no such word.
  const std::atomic<uint64_t>* watchWord = nullptr;
  uint64_t watchSeen = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  // Moves as much of op as possible now; true when complete. Errors name the peer.
  virtual Result<bool> progressSend(TransferOp& op) = 0;
  virtual Result<bool> progressRecv(TransferOp& op) = 0;
};

// Applies a receive action to one fragment landing at byte offset `offset` of the message.
void applyRecvAction(const TransferOp& op, size_t offset, const void* fragment, size_t bytes);

}  // namespace trnccl
