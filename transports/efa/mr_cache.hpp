// Memory registrations of one rail's domain, cached by address range so that a buffer used
// again (the common case: the same tensors every step) is registered once. Entries in use by
// posted operations are never evicted; idle ones go least-recently-used first past the cap.
//
// A cached range is trusted to still be the same memory, and nothing here can see a buffer
// being freed. Where registration is bookkeeping (tcp, shm) a stale entry is harmless: the
// provider reaches the memory by its address. Where it pins pages (providers that demand
// FI_MR_LOCAL or FI_MR_ALLOCATED, as EFA does), an entry that outlived its buffer would point
// the NIC at the old pages: a silently wrong result. So callers pass cacheable=false for
// user buffers there, and each message registers and releases its own; libfabric's EFA
// provider caches those registrations itself behind its memory monitors
// (FI_MR_CACHE_MONITOR), which do see munmap. The transport's own buffers (staging, control
// slots) live as long as it does and are always cached.
//
// Ranges the user registers (trncclCommRegister) are the safe way to cache there: the user
// promises the memory stays until trncclCommDeregister. Every use inside such a range is served
// by its registration, whatever the cache policy, and it is never evicted.
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
    bool transient = false;  // not in the cache: closed when its last user releases it
  };

  MrCache(Rail& rail, size_t maxEntries) : rail_(rail), maxEntries_(maxEntries) {}

  // The registration covering [addr, addr + bytes), made if needed; marks it in use until
  // release(). Registers whole pages so that neighbouring buffers share entries. With
  // cacheable=false the cache is neither consulted nor filled: a new registration serves
  // this use only.
  Result<Entry*> acquire(const void* addr, size_t bytes, bool cacheable = true);
  void release(Entry* entry);
  // trncclCommRegister / trncclCommDeregister. Deregistering fails as releasable() says.
  Result<Entry*> registerUser(const void* addr, size_t bytes);
  Status deregisterUser(Entry* entry);
  // Ok if `entry` is a live user registration that no posted operation uses; kInvalidArgument
  // if it is not one (it is never dereferenced then: a handle may be released twice),
  // kInvalidUsage while in use.
  Status releasable(const Entry* entry) const;
  static void* descriptor(Entry* entry) { return entry ? fi_mr_desc(entry->mr.get()) : nullptr; }

  size_t registrations() const { return registrations_; }
  size_t hits() const { return hits_; }
  size_t size() const { return entries_.size(); }
  size_t transientInUse() const { return transient_.size(); }
  size_t userRegistered() const { return user_.size(); }

 private:
  // Registers whole pages around [addr, addr + bytes); the entry is not yet filed anywhere.
  Result<std::unique_ptr<Entry>> registerPages(const void* addr, size_t bytes);
  void evictIdle();
  using UserMap = std::multimap<uintptr_t, std::unique_ptr<Entry>>;
  // user_'s element holding `entry`, or end(); releasableAt judges it, so that releasing
  // looks the entry up once.
  UserMap::const_iterator findUser(const Entry* entry) const;
  Status releasableAt(UserMap::const_iterator it) const;

  Rail& rail_;
  size_t maxEntries_;
  std::map<uintptr_t, std::unique_ptr<Entry>> entries_;  // by start address
  std::list<std::unique_ptr<Entry>> retired_;           // replaced while in flight; freed once idle
  std::map<Entry*, std::unique_ptr<Entry>> transient_;  // uncached, in use
  UserMap user_;                                        // by start address; may overlap
  uint64_t clock_ = 0;
  uint64_t nextKey_ = 1;
  size_t registrations_ = 0;
  size_t hits_ = 0;
};

}  // namespace trnccl::efa
