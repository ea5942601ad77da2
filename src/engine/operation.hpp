// One queued call on a communicator: a plan (built lazily, when the operation reaches the head
// of the queue, so that data-dependent plans and window state stay consistent across ranks)
// and the executor that advances its schedule without blocking. Subclasses (see comm.cpp)
// say how to plan and how to describe themselves; descriptions are only built for messages.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/coll_kind.hpp"
#include "engine/schedule.hpp"
#include "transports/shm/shared_alloc.hpp"

namespace trnccl {

// Messages and bytes this rank moved to and from one peer (whatever carried them), counted as
// each send or receive completes: tests and `trnccl-topo --stats` read which links carried
// what. Window reads of the direct algorithms are not messages and are not counted here; their
// CMA reads are, as received messages.
struct PeerTraffic {
  uint64_t sentMessages = 0, sentBytes = 0, recvMessages = 0, recvBytes = 0;
  void countSent(size_t bytes) {
    ++sentMessages;
    sentBytes += bytes;
  }
  void countReceived(size_t bytes) {
    ++recvMessages;
    recvBytes += bytes;
  }
};

// What the executor needs from the communicator.
struct ExecContext {
  int rank = 0;
  int localRank = 0;
  std::vector<Transport*> transportOfPeer;   // by global rank
  mutable std::vector<PeerTraffic> traffic;  // by global rank; counters, bumped by const steps
  std::vector<int> globalOfLocal;
  std::vector<int> pidOfLocal;  // for CMA reads
  shm::Segment* segment = nullptr;
  WindowState* windows = nullptr;
  // A call that copies at least this many bytes into user memory copies with streaming
  // stores (TRNCCL_STREAM_COPY_BYTES; 0 = never).
  size_t streamCopyBytes = 0;
  // Steps completed and transfers advanced (a fragment sent or received): the wait policy
  // sleeps only after this stood still for its spin time.
  mutable uint64_t progressEvents = 0;
  // Local peers' trncclMemAlloc allocations mapped here, for single-copy reads.
  shm::PeerRegionCache* peerRegions = nullptr;
  // Finished operations return their schedules here; the next ones reuse the memory.
  std::vector<std::unique_ptr<Schedule>> spareSchedules;
};

class Operation {
 public:
  explicit Operation(CollKind kind) : kind_(kind) {}
  virtual ~Operation() = default;
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;

  // Advances as far as possible; true when complete. An error leaves the op failed.
  Result<bool> progress(ExecContext& ctx);

  CollKind kind() const { return kind_; }
  // "AllReduce(count=1024, float, sum)": for logs and error messages only.
  virtual std::string description() const = 0;
  // Which peer the op is currently blocked on, for timeout messages (-1 = none).
  int blockedOnPeer() const { return blockedOnPeer_; }
  const char* blockedOn() const { return blockedOn_; }
  // The shared word the operation last found not ready (a peer's small-message tag or
  // progress counter) and the value it read: a waiter spins on this one word until it
  // changes instead of re-running the whole progress pass (nullptr: no such single word).
  struct SpinHint {
    const std::atomic<uint64_t>* word = nullptr;
    uint64_t seen = 0;
    uint64_t progressEvents = 0;  // the communicator's count when the hint was taken
    bool overNetwork = false;     // blocked on an efa peer, or on an unknown one with efa peers
    int blockedOnPeer = -1;
  };
  SpinHint spinHint() const { return spinHint_; }
  bool started() const { return started_; }
  // Where the running schedule stands (for the flight recorder): step groups finish in order.
  uint32_t stepsDone() const { return static_cast<uint32_t>(cursor_); }
  uint32_t stepsTotal() const;
  // When the operation was first seen blocked (0 = not yet); timeouts count from here, which
  // keeps clock reads off the path of calls that never wait.
  int64_t blockedSinceNs() const { return startNs_; }  // 0 = never blocked
  int64_t blockedSinceNs(int64_t now) {
    if (startNs_ == 0) startNs_ = now;
    return startNs_;
  }

  // Slow-path check while blocked on peer: has it published a different call for the same
  // position in the sequence? (Catches mismatches the first wait cannot see, e.g. a small
  // all-reduce on one rank against a large one on another.)
  Status probeMismatch(const ExecContext& ctx, int peerLocal) const;

  // Completion as seen by request holders, which may live on other threads.
  std::atomic<bool> finished{false};
  Status result;
  // trncclMemAlloc allocations the call uses, held until it finishes or fails.
  std::vector<std::shared_ptr<void>> pins;
  // The call's number in its communicator's flight recorder (0 = not recorded).
  uint64_t flightSeq = 0;

 private:
  virtual Status plan(ScheduleBuilder& builder) = 0;
  Result<bool> llReady(const ExecContext& ctx, const Step& step, size_t lines);
  // Whether local rank q's lines [firstLine, firstLine + lines) carry step.value.
  bool llLinesReady(const ExecContext& ctx, const Step& step, int q, size_t firstLine,
                    size_t lines);
  // kLLGather (blockPerPeer false) and kLLAllToAll (true): see the definition.
  Result<bool> gatherLines(const ExecContext& ctx, const Step& step, bool blockPerPeer);
  static const char* peerAllocation(const ExecContext& ctx, const Step& step,
                                    const shm::SharedRegion& region);
  // What this operation's callbacks see of local peers' published buffers.
  class PeerMemoryOf final : public ScheduleBuilder::PeerMemory {
   public:
    PeerMemoryOf(const Operation& op, const ExecContext& ctx) : op_(op), ctx_(ctx) {}
    ScheduleBuilder::PeerSendBuffer sendBuffer(int localPeer) const override;
    ScheduleBuilder::PeerSendBuffer region(int localPeer,
                                           const shm::SharedRegion& region) const override;
    void countRead(int localPeer, size_t bytes) const override;

   private:
    const Operation& op_;
    const ExecContext& ctx_;
  };
  Result<bool> runStep(const ExecContext& ctx, Step& step);
  Status checkDescriptors(const ExecContext& ctx);
  void chooseCopyKind(const ExecContext& ctx);

  CollKind kind_;
  std::unique_ptr<Schedule> schedule_;
  size_t cursor_ = 0;
  bool started_ = false;
  int64_t startNs_ = 0;
  int blockedOnPeer_ = -1;
  const char* blockedOn_ = "";
  SpinHint spinHint_;
};

}  // namespace trnccl
