// The efa transport's bookkeeping for one message in flight, and the registered control slots
// its rendezvous announcements live in. Internal to transports/efa.
#pragma once

#include <rdma/fabric.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.hpp"
#include "transports/efa/mr_cache.hpp"

namespace trnccl::efa {

struct Message;

constexpr size_t kFragBytes = 512 << 10;
constexpr uint32_t kMaxFragments = 4096;  // 12 tag bits
constexpr uint32_t kMaxStagedPerMessage = 8;

inline size_t fragmentBytes(size_t bytes) {
  return std::max(kFragBytes, (bytes + kMaxFragments - 1) / kMaxFragments);
}

// Tags: 1 bit control (rendezvous "done"), 19 bits of the rank that sends the tagged message,
// 32 bits of per-pair message sequence, 12 bits of fragment index.
constexpr uint64_t kSenderBits = 0x7FFFFull << 44;
inline uint64_t makeTag(int sender, uint32_t seq, uint32_t fragment, bool control = false) {
  return (control ? 1ull << 63 : 0) | (static_cast<uint64_t>(sender) << 44 & kSenderBits) |
         static_cast<uint64_t>(seq) << 12 | fragment;
}

// A failure notice (efa_notice.cpp): control bit, sender, sequence 0 and the last fragment
// index. A transfer's control messages always carry fragment 0, so no transfer's tag equals
// it; receivers match any sender by ignoring kSenderBits.
inline uint64_t noticeTag(int sender) {
  return makeTag(sender, 0, kMaxFragments - 1, true);
}
inline int senderOfTag(uint64_t tag) {
  return static_cast<int>((tag & kSenderBits) >> 44);
}

// The message size as remote CQ data, cut to what the provider carries (EFA: 4 bytes).
inline uint64_t sizeTag(size_t bytes, const Rail& rail) {
  return rail.cqDataBytes >= 8 ? bytes : (bytes & 0xFFFFFFFFu);
}

// What a posted libfabric operation was, so that its completion is booked correctly.
enum class OpKind : uint8_t {
  kData,      // an eager fragment (tagged send or receive)
  kRead,      // a rendezvous fragment pulled by the receiver (fi_read)
  kAnnounce,  // rendezvous: the sender's buffer description (sent / received)
  kDone,      // rendezvous: the receiver's "pulled everything" (sent / received)
  kNotice,    // a failure notice (sent / received): no Message
};

inline bool isControl(OpKind kind) {
  return kind == OpKind::kAnnounce || kind == OpKind::kDone;
}

struct FragmentContext {
  fi_context2 context;  // first: the provider's scratch space (FI_CONTEXT2 mode)
  Message* message = nullptr;
  OpKind kind = OpKind::kData;
  bool tx = false;  // uses the rail's transmit budget (sends, reads), else the receive budget
  int rail = 0;
  size_t offset = 0;
  size_t bytes = 0;
  char* staging = nullptr;  // receives that reduce land here first
  MrCache::Entry* stagingMr = nullptr;
};

// Where the receiver may read a rendezvous message from, on one rail.
struct RemoteBuffer {
  uint64_t addr = 0;  // virtual address, or offset into the registration (no FI_MR_VIRT_ADDR)
  uint64_t key = 0;
};

// The announcement's wire layout: this header, then `rails` RemoteBuffers.
struct AnnounceHeader {
  uint64_t bytes = 0;
  uint32_t rails = 0;
  uint32_t version = 1;
};

struct Message {
  int peer = -1;
  bool send = false;
  // Receives that reduce: fragments land in staging buffers when the destination overlaps
  // the local operand (in place), else straight in the destination and are reduced there.
  bool staged = false;
  bool reducesInDestination = false;
  bool rendezvous = false;
  uint32_t seq = 0;
  size_t bytes = 0;
  size_t fragBytes = 0;
  uint32_t fragments = 0;
  uint32_t posted = 0;      // data fragments: eager sends / receives, or rendezvous reads
  uint32_t completed = 0;   //
  uint32_t applied = 0;     // arrived fragments reduced into the destination
  uint32_t ctrlPosted = 0;  // rendezvous control messages (announce, done): at most 2
  uint32_t ctrlCompleted = 0;
  int slot = -1;                     // control slot holding the announcement
  bool announced = false;            // receiver: the sender's announcement arrived and was valid
  std::vector<RemoteBuffer> remote;  // receiver: the sender's buffer, per rail
  std::vector<MrCache::Entry*> mr;   // per rail: the whole user buffer
  std::vector<std::unique_ptr<FragmentContext>> contexts;
  std::vector<FragmentContext*> arrived;  // reduce receives: arrived, not yet reduced
  Status error;
  // Posting in stream order (EfaTransport::post): everything it puts on the pair's stream in
  // order is posted, so the next message may start.
  bool streamPosted = false;
  bool orphaned = false;  // its operation failed; freed once the provider is done with it

  bool providerDone() const { return completed >= posted && ctrlCompleted >= ctrlPosted; }
  bool reduces() const { return staged || reducesInDestination; }
};

// Small registered buffers for rendezvous announcements, handed out and returned by index.
// Chunks are registered once (on rail 0's domain, where control messages travel) and kept.
class ControlSlots {
 public:
  static constexpr size_t kSlotBytes = 1024;  // header + 32 rails x 16 bytes fits
  static constexpr size_t kSlotsPerChunk = 64;

  Result<int> take(MrCache& cache);
  void give(int slot) { free_.push_back(slot); }
  char* at(int slot) const {
    return chunks_[slot / kSlotsPerChunk].memory.get() + (slot % kSlotsPerChunk) * kSlotBytes;
  }
  void* descriptor(int slot) const {
    return MrCache::descriptor(chunks_[slot / kSlotsPerChunk].mr);
  }

 private:
  struct Chunk {
    std::unique_ptr<char[]> memory;
    MrCache::Entry* mr = nullptr;
  };
  std::vector<Chunk> chunks_;
  std::vector<int> free_;
};

}  // namespace trnccl::efa
