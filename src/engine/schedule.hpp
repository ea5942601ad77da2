// A collective is a schedule: a list of steps over chunks, built once per call by an algorithm
// in collectives/ and executed by the progress engine (operation.cpp). Steps that share a
// group number progress together (a ring step sends and receives at once); groups run in
// order. Algorithms name peers and buffers only; which transport moves a message is decided
// per peer by the communicator.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/copy.hpp"
#include "core/reduce.hpp"
#include "core/status.hpp"
#include "transports/shm/segment.hpp"
#include "transports/transport.hpp"

namespace trnccl {

enum class StepKind : uint8_t {
  kCopy,               // memcpy(dst, src, bytes); src may be a peer's window
  kReduce,             // reduce(pointers[first..first+n]) into dst
  kPost,               // my progress counter = value (release)
  kWaitPeers,          // every local peer in peers[first..first+n] has counter >= value
  kSend,               // message to a peer through its transport
  kRecv,               // message from a peer, copied or reduced as it lands
  kPublishDescriptor,  // write this op's descriptor where peers can read it
  kCheckDescriptors,   // compare peers' descriptors with ours (after they posted)
  kCallback,           // runs callbacks[first], which may append steps (data-dependent plans)
  kLLWrite,            // src/bytes into my LL lines of slot `first` from line n, tagged `value`
  kLLReduce,           // once every rank's lines carry `value`: reduce them (from byte n) into dst
  kLLWait,             // once every rank's first line carries `value` (a barrier)
  kLLGather,           // once every rank's lines carry `value`: rank q's bytes to dst + q * bytes
  kLLAllToAll,  // once every peer's block for me carries `value`: peer q's to dst + q * bytes
  kCmaRead,     // bytes from local rank `first`'s send (n 0) or receive (n 1) buffer (+ value)
                // into dst: mapped when it is trncclMemAlloc memory, else by CMA
};

// kWaitPeers with first == kAllPeers waits for local ranks 0..n-1 (no peer list needed).
constexpr uint32_t kAllPeers = 0xFFFFFFFFu;

struct Step {
  StepKind kind = StepKind::kCopy;
  uint32_t group = 0;
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;    // kCopy bytes, kReduce element count
  uint32_t first = 0;  // index into pointers / peers / callbacks
  uint32_t n = 0;
  uint64_t value = 0;  // kPost / kWaitPeers absolute counter value
  int avgDivisor = 0;  // kReduce
};  // kSend / kRecv keep their TransferOp in Schedule::transfers[first]: steps stay small

// Hash of what a call is (kind, type, op, root, count) and its sequence number; peers compare
// signatures to catch mismatched calls with one cache-line read. Never 0.
inline uint64_t callSignature(const shm::OpDescriptor& d) {
  uint64_t h = d.seq * 0x9E3779B97F4A7C15ULL;
  for (uint64_t v : {static_cast<uint64_t>(d.kind), static_cast<uint64_t>(d.dtype),
                     static_cast<uint64_t>(d.op), static_cast<uint64_t>(d.root), d.count}) {
    h ^= v + 0x632BE59BD9B4E019ULL + (h << 6) + (h >> 2);
  }
  return h | 1;
}

inline Step makeStep(StepKind kind) {
  Step step;
  step.kind = kind;
  return step;
}

class ScheduleBuilder;

struct Schedule {
  // Emptied for reuse: the vectors keep their capacity, so steady-state calls do not allocate.
  void clear() {
    steps.clear();
    pointers.clear();
    peers.clear();
    transfers.clear();
    callbacks.clear();
    stepDone.clear();
    groups = 0;
    descriptor = {};  // a call that publishes none must not carry the last one's
    signature = 0;
    userCopies = CopyKind::kCached;
    streamUnlessReadBack = false;
  }

  std::vector<Step> steps;
  std::vector<const void*> pointers;
  std::vector<int> peers;             // local indices for kWaitPeers
  std::vector<TransferOp> transfers;  // kSend / kRecv state
  std::vector<std::function<Status(ScheduleBuilder&)>> callbacks;
  std::vector<uint8_t> stepDone;  // executor state, one flag per step
  shm::OpDescriptor descriptor{};
  uint64_t signature = 0;  // callSignature(descriptor), computed once when it is published
  trncclDataType_t dtype = trncclUint8;
  trncclRedOp_t op = trncclSum;
  uint32_t groups = 0;
  // Operation::chooseCopyKind's rule for this call: false, no streaming stores when any read
  // falls in the range the call writes; true (all-gather), only when a step reads what an
  // earlier copy of the call wrote.
  bool streamUnlessReadBack = false;
  // How kCopy steps write into user memory; copies into the segment always stay cached.
  CopyKind userCopies = CopyKind::kCached;
};

// Tracks window slots and counter values across the operations of one communicator, so that
// the next operation waits only for what it will overwrite. Advanced at build time: every rank
// builds the same operations in the same order.
struct WindowState {
  uint64_t postsScheduled = 0;
  uint64_t descriptorSeq = 0;
  int nextSlot = 0;
  uint64_t slotReleasedAt[shm::kWindowSlots] = {0, 0};
  uint64_t llSeq = 0;  // small-message calls made so far; picks the LL slot and the tag
  // Per-communicator scratch for algorithms that need temporaries; operations run one at a
  // time, so the buffer is reused instead of allocated (and page-faulted) per call.
  std::vector<char> scratch;
};

class ScheduleBuilder {
 public:
  ScheduleBuilder(Schedule& schedule, WindowState* windows, int localSize)
      : s_(schedule), windows_(windows), localSize_(localSize) {}

  // Every step added until the next newGroup() progresses together.
  void newGroup() { ++s_.groups; }

  // How many pipelined slices the planner chose for this call (collectives/planner.hpp); the
  // algorithms that cut a call into slices read it, the others ignore it.
  void setPipelineSlices(int slices) { pipelineSlices_ = slices; }
  int pipelineSlices() const { return pipelineSlices_ > 0 ? pipelineSlices_ : 1; }

  void copy(void* dst, const void* src, size_t bytes) {
    if (bytes == 0 || dst == src) return;
    Step step = makeStep(StepKind::kCopy);
    step.dst = dst;
    step.src = src;
    step.bytes = bytes;
    add(step);
  }

  // dst = srcOf(0) op srcOf(1) op ... op srcOf(n-1), element-wise over count elements.
  template <typename SrcOf>
  void reduce(void* dst, int n, SrcOf srcOf, size_t count, int avgDivisor) {
    if (count == 0) return;
    Step step = makeStep(StepKind::kReduce);
    step.dst = dst;
    step.bytes = count;
    step.first = static_cast<uint32_t>(s_.pointers.size());
    step.n = static_cast<uint32_t>(n);
    step.avgDivisor = avgDivisor;
    for (int q = 0; q < n; ++q) s_.pointers.push_back(srcOf(q));
    add(step);
  }

  // Returns the counter value peers wait for to know this post happened.
  uint64_t post() {
    Step step = makeStep(StepKind::kPost);
    step.value = ++windows_->postsScheduled;
    add(step);
    return step.value;
  }

  // The value this rank's next post will carry.
  uint64_t nextPostValue() const { return windows_->postsScheduled + 1; }

  // Waits until every local rank (this one included) has posted value.
  void waitAll(uint64_t value) {
    if (value == 0) return;
    Step step = makeStep(StepKind::kWaitPeers);
    step.value = value;
    step.first = kAllPeers;
    step.n = static_cast<uint32_t>(localSize_);
    add(step);
  }

  void waitPeers(const std::vector<int>& localPeers, uint64_t value) {
    if (value == 0 || localPeers.empty()) return;
    Step step = makeStep(StepKind::kWaitPeers);
    step.value = value;
    step.first = static_cast<uint32_t>(s_.peers.size());
    step.n = static_cast<uint32_t>(localPeers.size());
    s_.peers.insert(s_.peers.end(), localPeers.begin(), localPeers.end());
    add(step);
  }

  void send(int peer, const void* src, size_t bytes) {
    TransferOp transfer;
    transfer.peer = peer;
    transfer.src = src;
    transfer.bytes = bytes;
    addTransfer(StepKind::kSend, transfer);
  }

  void recv(int peer, void* dst, size_t bytes, const RecvAction& action = {}) {
    TransferOp transfer;
    transfer.peer = peer;
    transfer.dst = dst;
    transfer.bytes = bytes;
    transfer.action = action;
    addTransfer(StepKind::kRecv, transfer);
  }

  void publishDescriptor(const shm::OpDescriptor& descriptor) {
    s_.descriptor = descriptor;
    s_.descriptor.seq = ++windows_->descriptorSeq;
    s_.signature = callSignature(s_.descriptor);
    add(makeStep(StepKind::kPublishDescriptor));
  }
  void checkDescriptors() { add(makeStep(StepKind::kCheckDescriptors)); }
  // After the wait that follows publishDescriptor (which carries sendAddress): a copy out of
  // the local peer's send buffer (or the receive buffer it published), at offset, straight
  // into dst.
  enum class PeerBuffer : uint32_t { kSend = 0, kRecv = 1 };
  void cmaRead(void* dst, int localPeer, size_t offset, size_t bytes,
               PeerBuffer from = PeerBuffer::kSend) {
    if (bytes == 0) return;
    Step step = makeStep(StepKind::kCmaRead);
    step.dst = dst;
    step.first = static_cast<uint32_t>(localPeer);
    step.n = static_cast<uint32_t>(from);
    step.value = offset;
    step.bytes = bytes;
    add(step);
  }

  // Small-message protocol (segment.hpp, LLLine). Call after publishDescriptor: the tag mixes
  // the call's signature in, so a peer making a different call never matches it.
  struct LLSlot {
    int slot;
    uint64_t tag;
  };
  LLSlot nextLLSlot() {
    uint64_t seq = ++windows_->llSeq;
    return {static_cast<int>(seq % shm::kLLSlots), (seq * 0x9E3779B97F4A7C15ULL) ^ s_.signature};
  }
  void llWrite(const LLSlot& ll, const void* src, size_t bytes, size_t firstLine = 0) {
    Step step = makeStep(StepKind::kLLWrite);
    step.src = src;
    step.bytes = bytes;
    step.n = static_cast<uint32_t>(firstLine);
    step.first = static_cast<uint32_t>(ll.slot);
    step.value = ll.tag;
    add(step);
  }
  // mine is this rank's own contribution, read from its source rather than from its line:
  // on AMD parts a line the peer just read may have migrated to that peer's cache, and reading
  // it back costs a transfer on the critical path. lineOffset: where, in bytes, the reduced
  // part starts in every rank's lines (a reduce-scatter reduces only this rank's block).
  void llReduce(const LLSlot& ll, const void* mine, void* dst, size_t count, int avgDivisor,
                size_t lineOffset = 0) {
    Step step = makeStep(StepKind::kLLReduce);
    step.src = mine;
    step.dst = dst;
    step.bytes = count;
    step.n = static_cast<uint32_t>(lineOffset);
    step.first = static_cast<uint32_t>(ll.slot);
    step.value = ll.tag;
    step.avgDivisor = avgDivisor;
    add(step);
  }
  // All-gather of `bytes` per rank; like llReduce, this rank's block comes from `mine`.
  void llGather(const LLSlot& ll, const void* mine, void* dst, size_t bytes) {
    addLLCopyOut(StepKind::kLLGather, ll, mine, dst, bytes);
  }
  // All-to-all of `bytes` per rank: peers' blocks for this rank (laid out by
  // shm::llAllToAllFirstLine) to dst + q * bytes; this rank's own block comes from `mine`.
  void llAllToAll(const LLSlot& ll, const void* mine, void* dst, size_t bytes) {
    addLLCopyOut(StepKind::kLLAllToAll, ll, mine, dst, bytes);
  }
  void llWait(const LLSlot& ll) {
    Step step = makeStep(StepKind::kLLWait);
    step.first = static_cast<uint32_t>(ll.slot);
    step.value = ll.tag;
    add(step);
  }

  void callback(std::function<Status(ScheduleBuilder&)> fn) {
    Step step = makeStep(StepKind::kCallback);
    step.first = static_cast<uint32_t>(s_.callbacks.size());
    s_.callbacks.push_back(std::move(fn));
    add(step);
  }

  // Window slots alternate across chunks and across operations. Before overwriting a slot,
  // wait until every peer has posted the value that ends its reads of that slot.
  int acquireSlot() {
    int slot = windows_->nextSlot;
    windows_->nextSlot = (slot + 1) % shm::kWindowSlots;
    waitAll(windows_->slotReleasedAt[slot]);
    return slot;
  }
  void releaseSlotAt(int slot, uint64_t value) { windows_->slotReleasedAt[slot] = value; }

  // Scratch memory valid until the operation completes.
  char* scratch(size_t bytes) {
    if (windows_->scratch.size() < bytes) windows_->scratch.resize(bytes);
    return windows_->scratch.data();
  }

  Schedule& schedule() { return s_; }
  int localSize() const { return localSize_; }

  // In a callback that runs after this call's descriptor was published and every local rank
  // posted: local peer q's published send buffer (OpDescriptor::sendAddress) mapped into this
  // process when it lies in memory peers map (shm::sharedAlloc's), with the bytes mapped from
  // there on (mapped is nullptr when it cannot be mapped, and outside callbacks).
  struct PeerSendBuffer {
    const char* mapped = nullptr;
    size_t bytes = 0;
  };
  class PeerMemory {
   public:
    virtual ~PeerMemory() = default;
    virtual PeerSendBuffer sendBuffer(int localPeer) const = 0;
    // Another allocation the peer named (shm::findSharedRegion on its side), mapped here.
    virtual PeerSendBuffer region(int localPeer, const shm::SharedRegion& region) const = 0;
    // Bytes read from the peer's buffer, counted as received from it (traffic counters).
    virtual void countRead(int localPeer, size_t bytes) const = 0;
  };
  void setPeerMemory(const PeerMemory* memory) { peerMemory_ = memory; }
  PeerSendBuffer peerSendBuffer(int localPeer) const {
    return peerMemory_ ? peerMemory_->sendBuffer(localPeer) : PeerSendBuffer{};
  }
  PeerSendBuffer peerRegion(int localPeer, const shm::SharedRegion& region) const {
    return peerMemory_ ? peerMemory_->region(localPeer, region) : PeerSendBuffer{};
  }
  void countPeerRead(int localPeer, size_t bytes) const {
    if (peerMemory_) peerMemory_->countRead(localPeer, bytes);
  }

 private:
  int pipelineSlices_ = 0;

  void addTransfer(StepKind kind, const TransferOp& transfer) {
    Step step = makeStep(kind);
    step.first = static_cast<uint32_t>(s_.transfers.size());
    s_.transfers.push_back(transfer);
    add(step);
  }

  void addLLCopyOut(StepKind kind, const LLSlot& ll, const void* mine, void* dst, size_t bytes) {
    Step step = makeStep(kind);
    step.src = mine;
    step.dst = dst;
    step.bytes = bytes;
    step.first = static_cast<uint32_t>(ll.slot);
    step.value = ll.tag;
    add(step);
  }

  void add(const Step& step) {
    s_.steps.push_back(step);
    s_.steps.back().group = s_.groups;
    newGroup();  // plain steps are groups of one; concurrent() below merges
  }

  Schedule& s_;
  WindowState* windows_;
  int localSize_;
  const PeerMemory* peerMemory_ = nullptr;

  friend class ConcurrentSteps;
};

// Within its lifetime, every step added to the builder shares one group (progresses together).
class ConcurrentSteps {
 public:
  explicit ConcurrentSteps(ScheduleBuilder& b) : b_(b), group_(b.schedule().groups) {
    begin_ = b.schedule().steps.size();
  }
  ~ConcurrentSteps() {
    auto& steps = b_.schedule().steps;
    for (size_t i = begin_; i < steps.size(); ++i) steps[i].group = group_;
    b_.schedule().groups = group_ + 1;
  }

 private:
  ScheduleBuilder& b_;
  uint32_t group_;
  size_t begin_;
};

}  // namespace trnccl
