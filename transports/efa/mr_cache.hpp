// Memory registrations of one rail's domain, cached by address range so that a buffer used
// again (the common case: the same tensors every step) is registered once. Entries in use by
// posted operations are never evicted; idle ones go least-recently-used first past the cap.
//
// Limit: a cached range is trusted to still be the same memory. With the tcp and shm
// providers registration is bookkeeping, so that is harmless; on EFA, where registration pins
// pages, a buffer freed and re-mapped at the same address needs libfabric's own MR cache
// monitors (FI_MR_CACHE_MONITOR) or trncclCommDeregister-style invalidation (not built yet).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>

#include "transports/efa/fabric.hpp"

namespace trnccl::efa {

class MrCache {
 public:
  struct Entry {
    uintptr_t start = 0;  // the registered range (whole pages)
    uintptr_t end = 0;
    Fid<fid_mr> mr;
    uint64_t lastUse = 0;
    int inUse = 0;
  };

  MrCache(Rail& rail, size_t maxEntries) : rail_(rail), maxEntries_(maxEntries) {}

  // The registration covering [addr, addr + bytes), made if needed; marks it in use until
  // release(). Registers whole pages so that neighbouring buffers share entries.
  Result<Entry*> acquire(const void* addr, size_t bytes);
  void release(Entry* entry) {
    if (entry) --entry->inUse;
  }
  static void* descriptor(Entry* entry) { return entry ? fi_mr_desc(entry->mr.get()) : nullptr; }

  size_t registrations() const { return registrations_; }
  size_t hits() const { return hits_; }
  size_t size() const { return entries_.size(); }

 private:
  void evictIdle();

  Rail& rail_;
  size_t maxEntries_;
  std::map<uintptr_t, std::unique_ptr<Entry>> entries_;  // by start address
  std::list<std::unique_ptr<Entry>> retired_;  // replaced while in flight; freed once idle
  uint64_t clock_ = 0;
  uint64_t nextKey_ = 1;
  size_t registrations_ = 0;
  size_t hits_ = 0;
};

}  // namespace trnccl::efa
