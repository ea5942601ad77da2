// trncclMemAlloc's memory: each allocation is its own memfd mapped shared, so that local
// peers can map it too (through /proc/<pid>/fd, which needs the same permission as CMA) and
// copy straight out of it with the CPU (streaming stores, no system call per copy) where
// other buffers take a process_vm_readv. The registry also refuses a free while a queued
// call still uses the allocation, a double free and a foreign pointer.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "core/status.hpp"

namespace trnccl::shm {

// Where an address lies in this process's allocations, as a peer needs it to map it.
struct SharedRegion {
  uint64_t id = 0;  // unique per process (0 = not in an allocation)
  int fd = -1;
  uint64_t offset = 0;  // of the address from the allocation's start
  uint64_t bytes = 0;   // mapped size of the allocation
};

Result<void*> sharedAlloc(size_t bytes);
Status sharedFree(void* ptr);
// True when p lies in a live allocation, filling *region (left as it was otherwise); cheap
// when there is none.
bool findSharedRegion(const void* p, SharedRegion* region);
// Keeps the allocation holding p from being freed while a call uses it (nullptr when p is in
// none); the pin ends when the returned pointer is released.
std::shared_ptr<void> pinSharedRegion(const void* p);

// Grow-only scratch that local peers can map (the MoE engine's direct staging): an
// allocation of sharedAlloc, replaced by a larger one when asked for more (contents are not
// kept), freed at destruction.
class SharedBuffer {
 public:
  SharedBuffer() = default;
  ~SharedBuffer();
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  Status reserve(size_t bytes);
  char* data() const { return data_; }
  size_t capacity() const { return bytes_; }

 private:
  char* data_ = nullptr;
  size_t bytes_ = 0;
};

// Peers' allocations this rank has mapped, by local peer and file descriptor number (a newer
// allocation on the same descriptor number replaces the mapping). Unmapped at destruction.
class PeerRegionCache {
 public:
  PeerRegionCache() = default;
  ~PeerRegionCache();
  PeerRegionCache(const PeerRegionCache&) = delete;
  PeerRegionCache& operator=(const PeerRegionCache&) = delete;
  // The start of the peer's allocation in this process, or nullptr when it cannot be mapped
  // (the caller falls back to process_vm_readv).
  const char* map(int localPeer, pid_t pid, const SharedRegion& region);

 private:
  struct Mapping {
    uint64_t id = 0;
    void* base = nullptr;
    size_t bytes = 0;
  };
  std::map<std::pair<int, int>, Mapping> mappings_;
};

}  // namespace trnccl::shm
