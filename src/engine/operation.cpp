#include "engine/operation.hpp"

#include <cstring>

#include "core/clock.hpp"
#include "core/dtype.hpp"

namespace trnccl {

Result<bool> Operation::progress(ExecContext& ctx) {
  if (!started_) {
    started_ = true;
    if (ctx.spareSchedules.empty()) {
      schedule_ = std::make_unique<Schedule>();
    } else {
      schedule_ = std::move(ctx.spareSchedules.back());
      ctx.spareSchedules.pop_back();
      schedule_->clear();
    }
    int localSize = static_cast<int>(ctx.globalOfLocal.size());
    ScheduleBuilder builder(*schedule_, ctx.windows, localSize);
    TRNCCL_RETURN_IF_ERROR(plan(builder));
  }
  if (!schedule_) return true;  // finished earlier; its schedule went back to the pool
  Schedule& s = *schedule_;
  while (cursor_ < s.steps.size()) {
    uint32_t group = s.steps[cursor_].group;
    size_t end = cursor_;
    while (end < s.steps.size() && s.steps[end].group == group) ++end;
    if (s.stepDone.size() < s.steps.size()) s.stepDone.resize(s.steps.size(), 0);
    bool allDone = true;
    for (size_t i = cursor_; i < end; ++i) {
      if (s.stepDone[i]) continue;
      // runStep must not touch its step after a callback appended steps (moves the vector).
      auto done = runStep(ctx, s.steps[i]);
      TRNCCL_RETURN_IF_ERROR(done.status());
      if (done.value()) {
        s.stepDone.resize(s.steps.size(), 0);
        s.stepDone[i] = 1;
      } else {
        allDone = false;
      }
    }
    if (!allDone) return false;
    cursor_ = end;
  }
  blockedOnPeer_ = -1;
  ctx.spareSchedules.push_back(std::move(schedule_));
  return true;
}

Result<bool> Operation::runStep(const ExecContext& ctx, Step& step) {
  switch (step.kind) {
    case StepKind::kCopy:
      std::memcpy(step.dst, step.src, step.bytes);
      return true;
    case StepKind::kReduce: {
      ReduceArgs args{schedule_->dtype, schedule_->op, step.dst, &schedule_->pointers[step.first],
                      static_cast<int>(step.n), step.bytes, step.avgDivisor};
      reduce(args);
      return true;
    }
    case StepKind::kPost:
      ctx.segment->rankArea(ctx.localRank)->counter.store(step.value, std::memory_order_release);
      return true;
    case StepKind::kWaitPeers:
      for (uint32_t i = 0; i < step.n; ++i) {
        int peer = step.first == kAllPeers ? static_cast<int>(i) : schedule_->peers[step.first + i];
        if (ctx.segment->rankArea(peer)->counter.load(std::memory_order_acquire) < step.value) {
          blockedOnPeer_ = ctx.globalOfLocal[peer];
          blockedOn_ = "waiting for a shared-window step of";
          return false;
        }
      }
      return true;
    case StepKind::kSend: {
      auto done = ctx.transportOfPeer[step.transfer.peer]->progressSend(step.transfer);
      if (done.isOk() && !done.value()) {
        blockedOnPeer_ = step.transfer.peer;
        blockedOn_ = "sending to";
      }
      return done;
    }
    case StepKind::kRecv: {
      auto done = ctx.transportOfPeer[step.transfer.peer]->progressRecv(step.transfer);
      if (done.isOk() && !done.value()) {
        blockedOnPeer_ = step.transfer.peer;
        blockedOn_ = "receiving from";
      }
      return done;
    }
    case StepKind::kPublishDescriptor: {
      shm::RankArea* mine = ctx.segment->rankArea(ctx.localRank);
      const shm::OpDescriptor& d = schedule_->descriptor;
      mine->descriptors[d.seq % shm::kDescriptorSlots] = d;
      mine->signatures[d.seq % shm::kSignatureSlots] = signatureOf(d);
      return true;  // the next post publishes it
    }
    case StepKind::kCheckDescriptors:
      TRNCCL_RETURN_IF_ERROR(checkDescriptors(ctx));
      return true;
    case StepKind::kCallback: {
      int localSize = static_cast<int>(ctx.globalOfLocal.size());
      ScheduleBuilder builder(*schedule_, ctx.windows, localSize);
      // Appended steps get fresh group numbers after every existing step.
      TRNCCL_RETURN_IF_ERROR(schedule_->callbacks[step.first](builder));
      return true;
    }
  }
  return makeError(Code::kInternalError, "unknown schedule step");
}

// A peer can be at most one direct operation ahead: to publish operation k+2 it must have
// completed k+1, which needs this rank's first post of k+1, which comes after this rank's
// check of k. So two signature slots (and four descriptor slots, for messages) suffice.
uint64_t Operation::signatureOf(const shm::OpDescriptor& d) {
  uint64_t h = d.seq * 0x9E3779B97F4A7C15ULL;
  for (uint64_t v : {static_cast<uint64_t>(d.kind), static_cast<uint64_t>(d.dtype),
                     static_cast<uint64_t>(d.op), static_cast<uint64_t>(d.root), d.count}) {
    h ^= v + 0x632BE59BD9B4E019ULL + (h << 6) + (h >> 2);
  }
  return h | 1;  // never 0, the value of a slot nobody wrote
}

static std::string describeCall(const shm::OpDescriptor& d) {
  std::string text = strformat("%s(count=%llu", collName(static_cast<CollKind>(d.kind)),
                               static_cast<unsigned long long>(d.count));
  if (d.dtype >= 0) text += strformat(", %s", dtypeName(static_cast<trncclDataType_t>(d.dtype)));
  if (d.op >= 0) text += strformat(", %s", redOpName(static_cast<trncclRedOp_t>(d.op)));
  if (d.root >= 0) text += strformat(", root=%d", d.root);
  return text + ")";
}

Status Operation::checkDescriptors(const ExecContext& ctx) {
  const shm::OpDescriptor& mine = schedule_->descriptor;
  int localSize = static_cast<int>(ctx.globalOfLocal.size());
  const uint64_t signature = signatureOf(mine);
  for (int peer = 0; peer < localSize; ++peer) {
    if (peer == ctx.localRank) continue;
    shm::RankArea* area = ctx.segment->rankArea(peer);
    if (area->signatures[mine.seq % shm::kSignatureSlots] == signature) continue;
    const shm::OpDescriptor& theirs =
        ctx.segment->rankArea(peer)->descriptors[mine.seq % shm::kDescriptorSlots];
    if (theirs.seq != mine.seq || theirs.kind != mine.kind || theirs.count != mine.count ||
        theirs.dtype != mine.dtype || theirs.op != mine.op || theirs.root != mine.root) {
      return makeError(Code::kInvalidUsage,
                       "mismatched calls as operation #%llu of this communicator: rank %d "
                       "called %s but rank %d called %s; every rank must make the same "
                       "collective calls in the same order with the same count, type, op "
                       "and root",
                       static_cast<unsigned long long>(mine.seq), ctx.rank,
                       describeCall(mine).c_str(), ctx.globalOfLocal[peer],
                       theirs.seq == mine.seq ? describeCall(theirs).c_str()
                                              : "a different sequence of operations");
    }
  }
  return Status::ok();
}

}  // namespace trnccl
