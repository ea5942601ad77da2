#include "transports/shm/shared_alloc.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

namespace trnccl::shm {
namespace {

struct Allocation {
  uint64_t id = 0;
  int fd = -1;
  char* base = nullptr;
  size_t bytes = 0;
  std::atomic<int> users{0};
};

struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, std::shared_ptr<Allocation>> byBase;
  std::atomic<size_t> live{0};
  uint64_t nextId = 1;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: pins may outlive static teardown
  return *r;
}

// The allocation containing p, with the registry locked.
std::shared_ptr<Allocation> findLocked(Registry& r, const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  auto it = r.byBase.upper_bound(address);
  if (it == r.byBase.begin()) return nullptr;
  --it;
  const Allocation& a = *it->second;
  if (address >= it->first + a.bytes) return nullptr;
  return it->second;
}

}  // namespace

Result<void*> sharedAlloc(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t mapped = (bytes + page - 1) / page * page;
  int fd = memfd_create("trnccl-memalloc", MFD_CLOEXEC);
  if (fd < 0)
    return makeError(Code::kSystemError, "trncclMemAlloc(%zu): memfd_create failed: %s", bytes,
                     std::strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(mapped)) != 0) {
    int e = errno;
    ::close(fd);
    return makeError(Code::kSystemError, "trncclMemAlloc(%zu): ftruncate failed: %s", bytes,
                     std::strerror(e));
  }
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    ::close(fd);
    return makeError(Code::kSystemError, "trncclMemAlloc(%zu): mmap failed: %s", bytes,
                     std::strerror(e));
  }
  auto allocation = std::make_shared<Allocation>();
  allocation->fd = fd;
  allocation->base = static_cast<char*>(p);
  allocation->bytes = mapped;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  allocation->id = r.nextId++;
  r.byBase[reinterpret_cast<uintptr_t>(p)] = std::move(allocation);
  r.live.fetch_add(1);
  return p;
}

Status sharedFree(void* ptr) {
  Registry& r = registry();
  std::shared_ptr<Allocation> allocation;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.byBase.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == r.byBase.end()) {
      if (auto inside = findLocked(r, ptr))
        return makeError(Code::kInvalidArgument,
                         "trncclMemFree(%p): the pointer lies inside an allocation that starts at "
                         "%p; pass the pointer trncclMemAlloc returned",
                         ptr, static_cast<void*>(inside->base));
      return makeError(Code::kInvalidArgument,
                       "trncclMemFree(%p): not a pointer trncclMemAlloc returned, or already "
                       "freed",
                       ptr);
    }
    if (int users = it->second->users.load(); users > 0)
      return makeError(Code::kInvalidUsage,
                       "trncclMemFree(%p): %d queued call(s) still use this buffer; wait for "
                       "them (trncclWait, or the blocking call's return) before freeing it",
                       ptr, users);
    allocation = std::move(it->second);
    r.byBase.erase(it);
    r.live.fetch_sub(1);
  }
  munmap(allocation->base, allocation->bytes);
  ::close(allocation->fd);
  return Status::ok();
}

bool findSharedRegion(const void* p, SharedRegion* region) {
  Registry& r = registry();
  if (r.live.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard<std::mutex> lock(r.mutex);
  auto allocation = findLocked(r, p);
  if (!allocation) return false;
  region->id = allocation->id;
  region->fd = allocation->fd;
  region->offset = static_cast<uint64_t>(static_cast<const char*>(p) - allocation->base);
  region->bytes = allocation->bytes;
  return true;
}

std::shared_ptr<void> pinSharedRegion(const void* p) {
  Registry& r = registry();
  if (!p || r.live.load(std::memory_order_relaxed) == 0) return nullptr;
  std::lock_guard<std::mutex> lock(r.mutex);
  auto allocation = findLocked(r, p);
  if (!allocation) return nullptr;
  allocation->users.fetch_add(1);
  return std::shared_ptr<void>(allocation.get(),
                               [allocation](void*) { allocation->users.fetch_sub(1); });
}

SharedBuffer::~SharedBuffer() {
  if (data_) (void)sharedFree(data_);
}

Status SharedBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_) return Status::ok();
  // Grow by at least half again, so that a slowly rising demand does not remap every call.
  const size_t want = std::max(bytes, bytes_ + bytes_ / 2);
  auto fresh = sharedAlloc(want);
  TRNCCL_RETURN_IF_ERROR(fresh.status());
  if (data_) TRNCCL_RETURN_IF_ERROR(sharedFree(data_));
  data_ = static_cast<char*>(fresh.value());
  bytes_ = want;
  return Status::ok();
}

PeerRegionCache::~PeerRegionCache() {
  for (auto& [key, m] : mappings_)
    if (m.base) munmap(m.base, m.bytes);
}

const char* PeerRegionCache::map(int localPeer, pid_t pid, const SharedRegion& region) {
  Mapping& m = mappings_[{localPeer, region.fd}];
  if (m.base && m.id == region.id && m.bytes == region.bytes) return static_cast<char*>(m.base);
  if (m.base) munmap(m.base, m.bytes);
  m = Mapping{};
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(region.fd);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  void* p = mmap(nullptr, region.bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return nullptr;
  m = Mapping{region.id, p, region.bytes};
  return static_cast<char*>(p);
}

}  // namespace trnccl::shm
