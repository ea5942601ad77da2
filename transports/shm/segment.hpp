// The node-wide shared-memory segment of one communicator: a header, one area per local rank
// (progress counter, published op descriptors, two staging windows) and one single-producer /
// single-consumer ring per ordered pair of local ranks. The segment file is unlinked as soon
// as every local rank has mapped it, so a killed rank never leaves it behind.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "core/clock.hpp"
#include "core/status.hpp"
#include "transports/shm/shared_alloc.hpp"

namespace trnccl::shm {

constexpr int kDescriptorSlots = 4;  // a peer runs at most one operation ahead
constexpr int kWindowSlots = 2;

// What a rank says it is doing, so peers can catch mismatched calls before they corrupt data.
struct OpDescriptor {
  uint64_t seq;
  int32_t kind;
  int32_t dtype;
  int32_t op;
  int32_t root;
  uint64_t count;
  uint64_t extra;  // collective specific (e.g. all-to-all-v max block bytes)
  // The caller's send buffer in its own address space, for peers that read it with CMA
  // (single-copy schedules); not part of the call's signature. When it lies in a
  // trncclMemAlloc allocation, the allocation (shared_alloc.hpp; id 0 = none): peers map it.
  uint64_t sendAddress;
  SharedRegion sendRegion;
  // The same for the receive buffer, published by schedules whose peers read results out of
  // it (the single-copy all-reduce of trncclMemAlloc buffers).
  uint64_t recvAddress;
  SharedRegion recvRegion;
};

// One rank's block for one peer in an all-to-all-v: its size, and where it starts in the
// sender's buffer (for peers that read it there, with CMA).
struct SendBlock {
  uint64_t bytes;
  uint64_t offset;
};

struct SegmentParams {
  uint32_t localSize = 0;
  uint32_t ringSlots = 8;
  uint64_t ringSlotBytes = 64 << 10;
  uint64_t windowBytes = 256 << 10;  // per window slot
  // Settings every local rank must share for the algorithms to agree step by step: the
  // creator's values bind (oneShotMaxBytes), or are compared at attach (algorithmHash).
  uint64_t oneShotMaxBytes = 16 << 10;
  uint64_t llMaxBytes = 64;
  uint64_t algorithmHash = 0;
  // Blocks of at least cmaMinBytes and fewer than cmaMaxBytes are read from peers' buffers
  // with CMA, when every local rank can (cmaMinBytes 0 = never; TRNCCL_CMA,
  // TRNCCL_CMA_MIN_BYTES, TRNCCL_CMA_MAX_BYTES). kernelCopyPermille: how many times longer the
  // kernel's copy took than memcpy when the creator timed it (x1000; 0 = not timed).
  uint64_t cmaMinBytes = 0;
  uint64_t cmaMaxBytes = UINT64_MAX;
  uint64_t kernelCopyPermille = 0;
};

struct alignas(64) SegmentHeader {
  std::atomic<uint64_t> magic;
  SegmentParams params;
  uint64_t rankAreaBytes;
  uint64_t ringBytes;
  uint64_t totalBytes;
  std::atomic<uint32_t> attached;
  std::atomic<int32_t> abortCode;  // Code value of the first fatal error, 0 = healthy
  int32_t abortRank;               // global rank that raised it
  char abortReason[512];
  // Sleeping waiters (Communicator::wait): how many local ranks are asleep or about to be,
  // and the word they sleep on, bumped by every store a peer may be waiting for.
  alignas(64) std::atomic<uint32_t> sleepers;
  std::atomic<uint32_t> doorbell;
  // Init's CMA probe (Communicator::setupCma): ranks that probed their peers, and how many
  // of them failed.
  std::atomic<uint32_t> cmaProbed;
  std::atomic<uint32_t> cmaFailed;
};

constexpr int kSignatureSlots = 2;  // see Operation::checkDescriptors for why two suffice

// Small-message ("LL", low-latency) lines: 56 bytes of payload and an 8-byte tag in one cache
// line. A writer stores the payload, then the tag (release); a reader that sees the expected
// tag owns the payload, so a small all-reduce costs one line transfer per peer and no
// separate flag. Two slots alternate between calls.
constexpr int kLLSlots = 2;
constexpr int kLLLines = 16;
constexpr size_t kLLPayloadBytes = 56;
constexpr size_t kLLMaxBytes = kLLLines * kLLPayloadBytes;
constexpr int kLLMaxRanks = 64;  // the reduce step keeps its source list on the stack
// Lines that carry `bytes` of payload; an empty payload still takes one, for its tag.
constexpr size_t llLinesFor(size_t bytes) {
  return std::max<size_t>(1, (bytes + kLLPayloadBytes - 1) / kLLPayloadBytes);
}
// Small all-to-all: each rank writes one block per peer into its lines, every block starting
// on a line of its own, in peer order with no block for itself. The first line of the block
// `writer` holds for `reader` (reader != writer):
constexpr size_t llAllToAllFirstLine(int writer, int reader, size_t blockBytes) {
  return static_cast<size_t>(reader < writer ? reader : reader - 1) * llLinesFor(blockBytes);
}
// Lines a rank writes for a small all-to-all of blockBytes per rank among nranks.
constexpr size_t llAllToAllLines(int nranks, size_t blockBytes) {
  return static_cast<size_t>(nranks - 1) * llLinesFor(blockBytes);
}

constexpr size_t alignUp(size_t value, size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

struct alignas(64) LLLine {
  char payload[kLLPayloadBytes];
  std::atomic<uint64_t> tag;
};

struct alignas(64) RankArea {
  // One cache line carries what peers poll on the hot path: the progress counter and the
  // signature (hash) of the current call, so a peer's check costs a single line transfer.
  alignas(64) std::atomic<uint64_t> counter;
  std::atomic<uint64_t> signatures[kSignatureSlots];
  std::atomic<uint32_t> departed;  // set by trncclCommDestroy: gone on purpose, not crashed
  // Full descriptors, read only to explain a mismatch.
  alignas(64) OpDescriptor descriptors[kDescriptorSlots];
  LLLine ll[kLLSlots][kLLLines];
  // followed by uint64_t sendBytes[kDescriptorSlots][localSize], then the windows
};

// A point-to-point ring from one local rank to another. The consumer learns of a fragment from
// the slot itself (SlotHeader::sequence), not from `head`, and the producer reads `tail` only
// when its cached copy says the ring is full: a small message then moves the slot's lines and
// nothing else between the two cores.
struct alignas(64) RingHeader {
  alignas(64) std::atomic<uint64_t> head;  // fragments published (the producer's own count)
  alignas(64) std::atomic<uint64_t> tail;  // fragments consumed by the consumer
};

// Fragments up to this size travel inside the header's cache line, so that a small message
// moves one line between the cores, not a header line and then a payload line.
constexpr size_t kSlotInlineBytes = 32;

struct SlotHeader {
  uint64_t fragmentBytes;
  uint64_t messageBytes;
  uint64_t offset;
  // The fragment's ring index + 1, stored last (release): the slot holds that fragment once
  // it reads so. Zeroed memory and older laps of the ring never match.
  std::atomic<uint64_t> sequence;
  char inlinePayload[kSlotInlineBytes];  // the fragment, when it is this small
};

class Segment {
 public:
  Segment() = default;
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Local rank 0 creates, the others open; returns once every local rank has mapped it (and
  // the file is unlinked). peersAlive is polled while waiting; when it (or the deadline)
  // fails, the file is unlinked before the error is returned, so nothing is left behind.
  // globalRank (for the abort word) names this rank when it gives up after mapping.
  Status attach(const std::string& dir, const std::string& name, int localRank,
                const SegmentParams& wanted, const Deadline& deadline,
                const std::function<Status()>& peersAlive, int globalRank = -1);

  const SegmentParams& params() const { return header_->params; }
  SegmentHeader* header() const { return header_; }
  RankArea* rankArea(int localRank) const {  // on every step's path: inline
    return reinterpret_cast<RankArea*>(base_ + rankAreasOffset() +
                                       localRank * header_->rankAreaBytes);
  }
  // Whether p points into the mapping (a window or ring) rather than into a user buffer.
  bool contains(const void* p) const {
    auto* c = static_cast<const char*>(p);
    return c >= base_ && c < base_ + mappedBytes_;
  }
  // What a rank sends each peer in the all-to-all-v with this seq (one entry per local rank).
  SendBlock* sendTable(int localRank, uint64_t seq) const;
  char* window(int localRank, int slot) const;
  RingHeader* ring(int fromLocal, int toLocal) const;
  char* ringSlot(int fromLocal, int toLocal, uint64_t index) const;  // SlotHeader then data
  static constexpr size_t kSlotHeaderBytes = 64;
  static_assert(sizeof(SlotHeader) == kSlotHeaderBytes, "a slot's header is one cache line");
  // Where a fragment's bytes are in its slot.
  static char* slotPayload(char* slot, uint64_t fragmentBytes) {
    return fragmentBytes <= kSlotInlineBytes ? slot + offsetof(SlotHeader, inlinePayload)
                                             : slot + kSlotHeaderBytes;
  }

  // After every store a sleeping peer may be waiting for (a fragment, a freed ring slot, a
  // progress counter, a small-message line, an abort): wakes the node's sleepers, if any.
  // Costs a fence and the read of a line nobody writes while no rank sleeps.
  void wakeSleepers() {
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with beginSleep's
    if (header_->sleepers.load(std::memory_order_relaxed) != 0) ringDoorbell();
  }
  // The sleeper's side, in this order: beginSleep (returns the doorbell's value), then check
  // once more what it waits for, then sleep (returns when the doorbell moved past `ticket`, or
  // after timeoutNs), then endSleep. A store made after the check rings the doorbell, so no
  // wake is lost between the check and the sleep.
  uint32_t beginSleep() {
    header_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return header_->doorbell.load(std::memory_order_acquire);
  }
  void sleep(uint32_t ticket, int64_t timeoutNs);
  void endSleep() { header_->sleepers.fetch_sub(1, std::memory_order_relaxed); }
  // True once after this process woke sleepers: the scheduler may have queued a woken rank on
  // this rank's core, which a spinning waiter would keep from it (Communicator::wait yields).
  bool takeWokeSleepers() {
    return wokeSleepers_.load(std::memory_order_relaxed) &&
           wokeSleepers_.exchange(false, std::memory_order_relaxed);
  }

  // First error wins; later calls keep the first reason.
  void raiseAbort(Code code, int rank, const std::string& reason);
  // On init's failure path, before the segment's name is unlinked (segment.cpp).
  void lingerForLateAttachers() const;
  bool aborted() const { return header_->abortCode.load(std::memory_order_acquire) > 0; }
  std::string abortReason() const;
  int abortRank() const { return header_->abortRank; }

 private:
  void ringDoorbell();
  std::atomic<bool> wokeSleepers_{false};
  // The header's page(s) come first; the rank areas follow.
  static constexpr size_t rankAreasOffset() { return alignUp(sizeof(SegmentHeader), 4096); }
  static size_t layout(const SegmentParams& params, uint64_t* rankAreaBytes, uint64_t* ringBytes);
  char* base_ = nullptr;
  size_t mappedBytes_ = 0;
  SegmentHeader* header_ = nullptr;
  std::string path_;
};

}  // namespace trnccl::shm
