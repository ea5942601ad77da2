#include "transports/shm/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

#include "core/futex.hpp"
#include "core/log.hpp"

namespace trnccl::shm {
namespace {

constexpr uint64_t kMagic = 0x74726e6363534847ULL;  // "trnccSHG"

}  // namespace

size_t Segment::layout(const SegmentParams& p, uint64_t* rankAreaBytes, uint64_t* ringBytes) {
  size_t descriptors = sizeof(RankArea) + sizeof(SendBlock) * kDescriptorSlots * p.localSize;
  *rankAreaBytes = alignUp(descriptors, 4096) + kWindowSlots * alignUp(p.windowBytes, 4096);
  *ringBytes = sizeof(RingHeader) + p.ringSlots * (kSlotHeaderBytes + p.ringSlotBytes);
  *ringBytes = alignUp(*ringBytes, 4096);
  return rankAreasOffset() + p.localSize * *rankAreaBytes +
         static_cast<size_t>(p.localSize) * p.localSize * *ringBytes;
}

Segment::~Segment() {
  if (base_) munmap(base_, mappedBytes_);
}

namespace {
// How long a rank that gives up on a dead peer before mapping the segment stays alive.
constexpr int kFollowerLingerMs = 300;
}  // namespace

Status Segment::attach(const std::string& dir, const std::string& name, int localRank,
                       const SegmentParams& wanted, const Deadline& deadline,
                       const std::function<Status()>& peersAlive, int globalRank) {
  path_ = dir + "/" + name;
  int fd = -1;
  if (localRank == 0) {
    uint64_t rankAreaBytes, ringBytes;
    size_t total = layout(wanted, &rankAreaBytes, &ringBytes);
    fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
      return makeError(Code::kSystemError,
                       "cannot create shared-memory segment %s: %s "
                       "(TRNCCL_SHM_DIR must be a writable tmpfs)",
                       path_.c_str(), strerror(errno));
    if (::ftruncate(fd, static_cast<off_t>(total)) != 0) {
      int err = errno;
      ::close(fd);
      ::unlink(path_.c_str());
      return makeError(Code::kSystemError,
                       "cannot size shared-memory segment %s to %zu bytes: "
                       "%s (is %s full?)",
                       path_.c_str(), total, strerror(err), dir.c_str());
    }
    void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) {
      ::unlink(path_.c_str());
      return makeError(Code::kSystemError, "mmap of %s failed: %s", path_.c_str(), strerror(errno));
    }
    base_ = static_cast<char*>(p);
    mappedBytes_ = total;
    header_ = new (base_) SegmentHeader();
    header_->params = wanted;
    header_->rankAreaBytes = rankAreaBytes;
    header_->ringBytes = ringBytes;
    header_->totalBytes = total;
    header_->attached.store(0);
    header_->abortCode.store(0);
    header_->sleepers.store(0);
    header_->doorbell.store(0);
    header_->cmaProbed.store(0);
    header_->cmaFailed.store(0);
    for (uint32_t r = 0; r < wanted.localSize; ++r) new (rankArea(r)) RankArea();
    for (uint32_t i = 0; i < wanted.localSize; ++i)
      for (uint32_t j = 0; j < wanted.localSize; ++j)
        if (i != j) new (ring(i, j)) RingHeader();
    header_->magic.store(kMagic, std::memory_order_release);
  } else {
    // Wait for the creator: the file must exist, be fully sized and carry the magic.
    while (true) {
      fd = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
      if (fd >= 0) {
        struct stat st {};
        if (fstat(fd, &st) == 0 && st.st_size >= static_cast<off_t>(sizeof(SegmentHeader))) {
          void* p = mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
          if (p != MAP_FAILED) {
            auto* header = static_cast<SegmentHeader*>(p);
            if (header->magic.load(std::memory_order_acquire) == kMagic &&
                header->totalBytes == static_cast<uint64_t>(st.st_size)) {
              ::close(fd);
              base_ = static_cast<char*>(p);
              mappedBytes_ = st.st_size;
              header_ = header;
              break;
            }
            munmap(p, st.st_size);
          }
        }
        ::close(fd);
      }
      if (deadline.expired()) {
        ::unlink(path_.c_str());
        return makeError(Code::kTimeout,
                         "shared-memory segment %s was not created by local "
                         "rank 0 in time (TRNCCL_TIMEOUT)",
                         path_.c_str());
      }
      if (Status alive = peersAlive(); !alive.isOk()) {
        // A peer died before this rank could map the segment, so it cannot say why in the
        // abort word: it stays a moment, so that the other waiting ranks see that peer's death
        // first and not this rank's exit (they would name it instead of the rank that died).
        std::this_thread::sleep_for(std::chrono::milliseconds(kFollowerLingerMs));
        ::unlink(path_.c_str());
        return alive;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  if (header_->params.algorithmHash != wanted.algorithmHash) {
    Status mismatch = makeError(Code::kInvalidUsage,
                                "local rank %d's TRNCCL_ALGO (or config algorithm) differs from "
                                "local rank 0's; every rank must use the same algorithm settings",
                                localRank);
    raiseAbort(mismatch.code(), localRank, mismatch.message());  // the others fail init too
    header_->attached.fetch_add(1);  // counted, so nobody waits for this rank
    return mismatch;
  }
  uint32_t count = header_->attached.fetch_add(1) + 1;
  if (count == header_->params.localSize) {
    ::unlink(path_.c_str());  // everyone has it mapped: the name is no longer needed
    TRNCCL_TRACE(log::kShm, "segment %s unlinked after %u ranks attached", path_.c_str(), count);
  }
  // Wait for the others, so that a rank dying before it maps the segment cannot strand it.
  while (header_->attached.load(std::memory_order_acquire) < header_->params.localSize) {
    Status problem = deadline.expired() ? makeError(Code::kTimeout,
                                                    "not every local rank mapped the shared-"
                                                    "memory segment in time (TRNCCL_TIMEOUT)")
                                        : peersAlive();
    if (!problem.isOk()) {
      // The last peers may have attached, finished and exited between the count read above and
      // the liveness check: then everyone mapped the segment and init succeeded (a peer gone
      // since is the collectives' to report, as for any rank that exits after init).
      if (header_->attached.load(std::memory_order_acquire) >= header_->params.localSize) break;
      // Local ranks that map the segment after this one gives up read why in its abort word,
      // not only that it left (they would blame its exit for another rank's death). Those
      // still looking for the segment get a moment to map it before its name goes.
      if (!aborted())
        raiseAbort(problem.code(), globalRank,
                   globalRank >= 0 ? strformat("rank %d: %s", globalRank, problem.message().c_str())
                                   : problem.message());
      lingerForLateAttachers();
      ::unlink(path_.c_str());
      return problem;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (aborted())
    return makeError(Code::kInvalidUsage, "initialisation failed on another local rank: %s",
                     abortReason().c_str());
  return Status::ok();
}

void Segment::lingerForLateAttachers() const {
  // Until no rank has attached for 50 ms, at most 300 ms: a failure path only.
  const auto start = std::chrono::steady_clock::now();
  auto quietSince = start;
  uint32_t seen = header_->attached.load(std::memory_order_acquire);
  while (seen < header_->params.localSize) {
    const auto now = std::chrono::steady_clock::now();
    if (now - quietSince > std::chrono::milliseconds(50) ||
        now - start > std::chrono::milliseconds(300))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const uint32_t count = header_->attached.load(std::memory_order_acquire);
    if (count != seen) {
      seen = count;
      quietSince = std::chrono::steady_clock::now();
    }
  }
}

SendBlock* Segment::sendTable(int localRank, uint64_t seq) const {
  auto* table =
      reinterpret_cast<SendBlock*>(reinterpret_cast<char*>(rankArea(localRank)) + sizeof(RankArea));
  return table + (seq % kDescriptorSlots) * header_->params.localSize;
}

char* Segment::window(int localRank, int slot) const {
  const SegmentParams& p = header_->params;
  size_t descriptors = sizeof(RankArea) + sizeof(SendBlock) * kDescriptorSlots * p.localSize;
  return reinterpret_cast<char*>(rankArea(localRank)) + alignUp(descriptors, 4096) +
         slot * alignUp(p.windowBytes, 4096);
}

RingHeader* Segment::ring(int fromLocal, int toLocal) const {
  const SegmentParams& p = header_->params;
  size_t offset = rankAreasOffset() + p.localSize * header_->rankAreaBytes +
                  (static_cast<size_t>(fromLocal) * p.localSize + toLocal) * header_->ringBytes;
  return reinterpret_cast<RingHeader*>(base_ + offset);
}

char* Segment::ringSlot(int fromLocal, int toLocal, uint64_t index) const {
  const SegmentParams& p = header_->params;
  char* slots = reinterpret_cast<char*>(ring(fromLocal, toLocal)) + sizeof(RingHeader);
  return slots + (index % p.ringSlots) * (kSlotHeaderBytes + p.ringSlotBytes);
}

void Segment::raiseAbort(Code code, int rank, const std::string& reason) {
  int32_t expected = 0;
  // Claim with a sentinel first so that the reason is written before anyone reads the code.
  if (!header_->abortCode.compare_exchange_strong(expected, -1)) return;
  header_->abortRank = rank;
  std::snprintf(header_->abortReason, sizeof(header_->abortReason), "%s", reason.c_str());
  header_->abortCode.store(static_cast<int32_t>(code), std::memory_order_release);
  wakeSleepers();  // a sleeping waiter learns of it at once
}

void Segment::ringDoorbell() {
  header_->doorbell.fetch_add(1, std::memory_order_release);
  futexWakeAll(&header_->doorbell);
  wokeSleepers_.store(true, std::memory_order_relaxed);
}

void Segment::sleep(uint32_t ticket, int64_t timeoutNs) {
  futexWait(&header_->doorbell, ticket, timeoutNs);
}

std::string Segment::abortReason() const {
  if (header_->abortCode.load(std::memory_order_acquire) <= 0) return "";
  return header_->abortReason;
}

}  // namespace trnccl::shm
