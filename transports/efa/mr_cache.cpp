#include "transports/efa/mr_cache.hpp"

#include <unistd.h>

#include <algorithm>
#include <vector>

namespace trnccl::efa {

Result<MrCache::Entry*> MrCache::acquire(const void* addr, size_t bytes, bool cacheable) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t end = start + std::max<size_t>(bytes, 1);
  // The user's registrations first: they serve whatever the cache policy says. Few exist, so
  // a scan of those starting at or before `start` is cheap.
  for (auto it = user_.upper_bound(start); it != user_.begin();) {
    Entry& found = *(--it)->second;
    if (found.end >= end) {
      ++hits_;
      ++found.inUse;
      return &found;
    }
  }
  auto it = entries_.upper_bound(start);
  if (cacheable && it != entries_.begin()) {
    auto candidate = std::prev(it);
    Entry& found = *candidate->second;
    if (found.end >= end) {
      ++hits_;
      found.lastUse = ++clock_;
      ++found.inUse;
      return &found;
    }
  }
  auto made = registerPages(addr, bytes);
  TRNCCL_RETURN_IF_ERROR(made.status());
  std::unique_ptr<Entry> entry = std::move(made.value());
  entry->lastUse = ++clock_;
  entry->inUse = 1;
  Entry* result = entry.get();
  if (!cacheable) {
    entry->transient = true;
    transient_.emplace(result, std::move(entry));
    return result;
  }
  evictIdle();
  auto& slot = entries_[entry->start];
  // A smaller range starting at the same page may still be in flight: keep it alive.
  if (slot && slot->inUse > 0) retired_.push_back(std::move(slot));
  slot = std::move(entry);
  return result;
}

Result<std::unique_ptr<MrCache::Entry>> MrCache::registerPages(const void* addr, size_t bytes) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t end = start + std::max<size_t>(bytes, 1);
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t base = start / page * page;
  const uintptr_t limit = (end + page - 1) / page * page;
  auto entry = std::make_unique<Entry>();
  entry->start = base;
  entry->end = limit;
  const uint64_t mrMode = rail_.info->domain_attr->mr_mode;
  const uint64_t key = (mrMode & FI_MR_PROV_KEY) ? 0 : nextKey_++;
  int rc = fi_mr_reg(rail_.domain.get(), reinterpret_cast<void*>(base), limit - base,
                     FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0,
                     key, 0, entry->mr.out(), nullptr);
  if (rc)
    return makeError(Code::kSystemError, "registering %zu bytes at %p with %s: %s",
                     static_cast<size_t>(limit - base), reinterpret_cast<void*>(base),
                     rail_.info->fabric_attr->prov_name, fiError("fi_mr_reg", rc).c_str());
  if (mrMode & FI_MR_ENDPOINT) {
    rc = fi_mr_bind(entry->mr.get(), &rail_.ep.get()->fid, 0);
    if (rc == 0) rc = fi_mr_enable(entry->mr.get());
    if (rc)
      return makeError(Code::kSystemError, "binding a registration to the endpoint: %s",
                       fiError("fi_mr_bind/enable", rc).c_str());
  }
  ++registrations_;
  return entry;
}

Result<MrCache::Entry*> MrCache::registerUser(const void* addr, size_t bytes) {
  auto made = registerPages(addr, bytes);
  TRNCCL_RETURN_IF_ERROR(made.status());
  std::unique_ptr<Entry> entry = std::move(made.value());
  Entry* result = entry.get();
  user_.emplace(result->start, std::move(entry));
  return result;
}

MrCache::UserMap::const_iterator MrCache::findUser(const Entry* entry) const {
  // Compares pointers only: a released handle must not be dereferenced.
  return std::find_if(user_.begin(), user_.end(),
                      [&](const auto& filed) { return filed.second.get() == entry; });
}

Status MrCache::releasableAt(UserMap::const_iterator it) const {
  if (it == user_.end())
    return makeError(Code::kInvalidArgument,
                     "not a registration of this transport (released already?)");
  const Entry& entry = *it->second;
  if (entry.inUse > 0)
    return makeError(Code::kInvalidUsage,
                     "the buffer at %p is still in use by %d posted network operation(s)",
                     reinterpret_cast<void*>(entry.start), entry.inUse);
  return Status::ok();
}

Status MrCache::releasable(const Entry* entry) const {
  return releasableAt(findUser(entry));
}

Status MrCache::deregisterUser(Entry* entry) {
  auto it = findUser(entry);
  TRNCCL_RETURN_IF_ERROR(releasableAt(it));
  user_.erase(it);  // closes the MR
  return Status::ok();
}

void MrCache::release(Entry* entry) {
  if (!entry) return;
  if (--entry->inUse == 0 && entry->transient) transient_.erase(entry);  // closes the MR
}

void MrCache::evictIdle() {
  retired_.remove_if([](const std::unique_ptr<Entry>& e) { return e->inUse == 0; });
  while (entries_.size() >= maxEntries_) {
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->second->inUse == 0 &&
          (oldest == entries_.end() || it->second->lastUse < oldest->second->lastUse))
        oldest = it;
    if (oldest == entries_.end()) return;  // everything is in flight: grow past the cap
    entries_.erase(oldest);
  }
}

}  // namespace trnccl::efa
