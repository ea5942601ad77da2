// Bootstrap wire format: a fixed header, then a payload of header.length bytes.
#pragma once

#include <cstdint>

namespace trnccl::bootstrap::wire {

constexpr uint32_t kMagic = 0x544e4231;  // "TNB1"
constexpr uint16_t kVersion = 4;  // 2: PeerInfo::machineHash, 3: cmaProbeAddress, 4: kernelHash
constexpr uint32_t kMaxPayload = 16u << 20;
constexpr uint32_t kIdMagic = 0x74726e69;  // "trni"

// After the table, each rank sends one kExchange blob (network addresses and anything else the
// ranks must agree on); the root answers every rank with kExchangeTable: uint32 n, uint32
// lengths[n], then the n blobs in rank order.
enum class Type : uint16_t {
  kHello = 1,
  kTable = 2,
  kError = 3,
  kExchange = 4,
  kExchangeTable = 5
};
constexpr uint32_t kMaxExchangeBytes = 64u << 10;

struct Header {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint32_t length;
};

struct Hello {
  uint64_t nonce;
  int32_t nranks;
  int32_t rank;
  int64_t timeoutMs;
  // followed by one PeerInfo
};

}  // namespace trnccl::bootstrap::wire
