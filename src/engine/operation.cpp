#include "engine/operation.hpp"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/clock.hpp"
#include "core/dtype.hpp"
#include "transports/shm/cma.hpp"

namespace trnccl {

uint32_t Operation::stepsTotal() const {
  return schedule_ ? static_cast<uint32_t>(schedule_->steps.size()) : 0;
}

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
    chooseCopyKind(ctx);
  }
  if (!schedule_) return true;  // finished earlier; its schedule went back to the pool
  spinHint_ = {};
  Schedule& s = *schedule_;
  size_t nsteps = s.steps.size();
  if (s.stepDone.size() < nsteps) s.stepDone.resize(nsteps, 0);
  while (cursor_ < nsteps) {
    const uint32_t group = s.steps[cursor_].group;
    size_t end = cursor_ + 1;
    while (end < nsteps && s.steps[end].group == group) ++end;
    bool allDone = true;
    for (size_t i = cursor_; i < end; ++i) {
      if (s.stepDone[i]) continue;
      // runStep must not touch its step after a callback appended steps (moves the vector).
      auto done = runStep(ctx, s.steps[i]);
      if (!done.isOk()) return done.status();
      if (done.value()) {
        s.stepDone[i] = 1;
        ++ctx.progressEvents;
      } else {
        allDone = false;
      }
    }
    if (s.steps.size() != nsteps) {  // a callback appended steps, in groups after this one
      nsteps = s.steps.size();
      s.stepDone.resize(nsteps, 0);
    }
    if (!allDone) return false;
    cursor_ = end;
  }
  blockedOnPeer_ = -1;
  // Callbacks may hold what their plan captured (the MoE engine's routings, which hold the
  // communicator): a pooled schedule must not keep it alive.
  s.callbacks.clear();
  ctx.spareSchedules.push_back(std::move(schedule_));
  return true;
}

namespace {

// Disjoint runs of user memory that a call's copies write, merged as they are added.
class WrittenRuns {
 public:
  bool overlaps(const void* at, size_t bytes) const {
    if (bytes == 0 || runs_.empty()) return false;
    const uintptr_t p = reinterpret_cast<uintptr_t>(at), end = p + bytes;
    auto it = runs_.upper_bound(p);  // the first run starting after p
    if (it != runs_.end() && it->first < end) return true;
    return it != runs_.begin() && std::prev(it)->second > p;
  }
  void add(const void* at, size_t bytes) {
    if (bytes == 0) return;
    uintptr_t p = reinterpret_cast<uintptr_t>(at), end = p + bytes;
    auto it = runs_.upper_bound(p);
    if (it != runs_.begin() && std::prev(it)->second >= p) {
      --it;
      p = it->first;
      end = std::max(end, it->second);
      it = runs_.erase(it);
    }
    while (it != runs_.end() && it->first <= end) {
      end = std::max(end, it->second);
      it = runs_.erase(it);
    }
    runs_.emplace(p, end);
  }

 private:
  std::map<uintptr_t, uintptr_t> runs_;
};

}  // namespace

// Counts what the plan copies into user memory (window-to-buffer copies, reads of peers'
// buffers and shared-memory receives) and switches the whole call to streaming stores past the
// threshold, so that one large call does not sweep the caches line by line with read-for-ownership
// traffic. Not when the call also reads the memory it writes (in place): there the lines being
// overwritten were just read and sit in the cache, and a streaming store would have to evict each
// one. Where the schedule says so (Schedule::streamUnlessReadBack: all-gather), only a step that
// reads what an earlier copy of the call wrote, or a read overlapping a transfer's copy (those
// progress in no fixed order with the steps), keeps the copies cached.
void Operation::chooseCopyKind(const ExecContext& ctx) {
  if (ctx.streamCopyBytes == 0) return;
  Schedule& s = *schedule_;
  auto inUser = [&](const void* p) { return !ctx.segment || !ctx.segment->contains(p); };
  auto isUserCopy = [](const TransferOp& t) {
    return t.dst && t.action.kind == RecvAction::Kind::kCopy;
  };
  auto copiesToUser = [&](const Step& step) {
    return (step.kind == StepKind::kCopy || step.kind == StepKind::kCmaRead) && inUser(step.dst);
  };
  // The hull of everything written; a read inside it counts as in place (a false positive
  // only costs the streaming stores).
  const char* lo = nullptr;
  const char* hi = nullptr;
  size_t userBytes = 0;
  auto wrote = [&](const void* dst, size_t bytes) {
    auto* p = static_cast<const char*>(dst);
    if (!lo || p < lo) lo = p;
    if (!hi || p + bytes > hi) hi = p + bytes;
    userBytes += bytes;
  };
  for (const Step& step : s.steps)
    if (copiesToUser(step)) wrote(step.dst, step.bytes);
  for (const TransferOp& t : s.transfers)
    if (isUserCopy(t)) wrote(t.dst, t.bytes);
  if (userBytes < ctx.streamCopyBytes) return;
  auto inHull = [&](const void* src, size_t bytes) {
    auto* p = static_cast<const char*>(src);
    return bytes && inUser(src) && p < hi && p + bytes > lo;
  };
  // The finer rule: what earlier steps' copies wrote, and whatever transfers write.
  WrittenRuns written;
  if (s.streamUnlessReadBack)
    for (const TransferOp& t : s.transfers)
      if (isUserCopy(t)) written.add(t.dst, t.bytes);
  auto stepReadsOutput = [&](const void* src, size_t bytes) {
    if (!s.streamUnlessReadBack) return inHull(src, bytes);
    return bytes && inUser(src) && written.overlaps(src, bytes);
  };
  const size_t esize = dtypeSize(s.dtype);
  for (const Step& step : s.steps) {
    if (step.kind == StepKind::kCopy && stepReadsOutput(step.src, step.bytes)) return;
    if (step.kind == StepKind::kReduce)
      for (uint32_t i = 0; i < step.n; ++i)
        if (stepReadsOutput(s.pointers[step.first + i], step.bytes * esize)) return;
    if (s.streamUnlessReadBack && copiesToUser(step)) written.add(step.dst, step.bytes);
  }
  // Transfers progress in no fixed order with the steps: any read of theirs in the written range.
  for (const TransferOp& t : s.transfers)
    if (inHull(t.src, t.bytes) || (t.action.local && inHull(t.action.local, t.bytes))) return;
  s.userCopies = CopyKind::kStreaming;
  for (TransferOp& t : s.transfers)
    if (isUserCopy(t)) t.action.copy = CopyKind::kStreaming;
}

Result<bool> Operation::runStep(const ExecContext& ctx, Step& step) {
  switch (step.kind) {
    case StepKind::kCopy:
      copyBytes(step.dst, step.src, step.bytes,
                ctx.segment && ctx.segment->contains(step.dst) ? CopyKind::kCached
                                                               : schedule_->userCopies);
      return true;
    case StepKind::kReduce: {
      ReduceArgs args{
          schedule_->dtype,         schedule_->op, step.dst,       &schedule_->pointers[step.first],
          static_cast<int>(step.n), step.bytes,    step.avgDivisor};
      reduce(args);
      return true;
    }
    case StepKind::kPost:
      ctx.segment->rankArea(ctx.localRank)->counter.store(step.value, std::memory_order_release);
      ctx.segment->wakeSleepers();
      return true;
    case StepKind::kWaitPeers:
      for (uint32_t i = 0; i < step.n; ++i) {
        int peer = step.first == kAllPeers ? static_cast<int>(i) : schedule_->peers[step.first + i];
        const std::atomic<uint64_t>& counter = ctx.segment->rankArea(peer)->counter;
        uint64_t seen = counter.load(std::memory_order_acquire);
        if (seen < step.value) {
          spinHint_ = {&counter, seen};
          blockedOnPeer_ = ctx.globalOfLocal[peer];
          blockedOn_ = "waiting for a shared-window step of";
          return false;
        }
      }
      return true;
    case StepKind::kSend: {
      TransferOp& transfer = schedule_->transfers[step.first];
      const size_t before = transfer.done;
      auto done = ctx.transportOfPeer[transfer.peer]->progressSend(transfer);
      ctx.progressEvents += transfer.done != before;
      if (done.isOk() && !done.value()) {
        blockedOnPeer_ = transfer.peer;
        blockedOn_ = "sending to";
      } else if (done.isOk()) {
        ctx.traffic[transfer.peer].countSent(transfer.bytes);
      }
      return done;
    }
    case StepKind::kRecv: {
      TransferOp& transfer = schedule_->transfers[step.first];
      const size_t before = transfer.done;
      auto done = ctx.transportOfPeer[transfer.peer]->progressRecv(transfer);
      ctx.progressEvents += transfer.done != before;
      if (done.isOk() && !done.value()) {
        if (transfer.watchWord) spinHint_ = {transfer.watchWord, transfer.watchSeen};
        blockedOnPeer_ = transfer.peer;
        blockedOn_ = "receiving from";
      } else if (done.isOk()) {
        ctx.traffic[transfer.peer].countReceived(transfer.bytes);
      }
      return done;
    }
    case StepKind::kPublishDescriptor: {
      shm::RankArea* mine = ctx.segment->rankArea(ctx.localRank);
      const shm::OpDescriptor& d = schedule_->descriptor;
      mine->descriptors[d.seq % shm::kDescriptorSlots] = d;
      mine->signatures[d.seq % shm::kSignatureSlots].store(schedule_->signature,
                                                           std::memory_order_release);
      return true;  // the next post publishes it
    }
    case StepKind::kCheckDescriptors: TRNCCL_RETURN_IF_ERROR(checkDescriptors(ctx)); return true;
    case StepKind::kLLWrite: {
      shm::LLLine* lines = ctx.segment->rankArea(ctx.localRank)->ll[step.first] + step.n;
      size_t nlines = shm::llLinesFor(step.bytes);
      for (size_t l = 0; l < nlines; ++l) {
        size_t offset = l * shm::kLLPayloadBytes;
        size_t len = offset < step.bytes ? std::min(shm::kLLPayloadBytes, step.bytes - offset) : 0;
        if (len) std::memcpy(lines[l].payload, static_cast<const char*>(step.src) + offset, len);
        lines[l].tag.store(step.value, std::memory_order_release);
      }
      ctx.segment->wakeSleepers();
      return true;
    }
    case StepKind::kLLReduce: {
      const size_t esize = dtypeSize(schedule_->dtype);
      const size_t bytes = step.bytes * esize;
      const size_t from = step.n;  // byte offset of this rank's part in every rank's lines
      const size_t nlines = shm::llLinesFor(from + bytes);
      auto ready = llReady(ctx, step, nlines);
      if (!ready.isOk() || !ready.value()) return ready;
      const int localSize = static_cast<int>(ctx.globalOfLocal.size());
      const void* srcs[shm::kLLMaxRanks];
      // One reduction per line-sized run; 56 is a multiple of every element size, so no
      // element straddles two lines.
      for (size_t done = 0; done < bytes;) {
        const size_t line = (from + done) / shm::kLLPayloadBytes;
        const size_t within = (from + done) % shm::kLLPayloadBytes;
        const size_t len = std::min(shm::kLLPayloadBytes - within, bytes - done);
        for (int q = 0; q < localSize; ++q)
          srcs[q] = q == ctx.localRank
                        ? static_cast<const char*>(step.src) + done
                        : ctx.segment->rankArea(q)->ll[step.first][line].payload + within;
        reduce({schedule_->dtype, schedule_->op, static_cast<char*>(step.dst) + done, srcs,
                localSize, len / esize, step.avgDivisor});
        done += len;
      }
      return true;
    }
    case StepKind::kLLWait: return llReady(ctx, step, 1);
    case StepKind::kLLGather: return gatherLines(ctx, step, false);
    case StepKind::kLLAllToAll: return gatherLines(ctx, step, true);
    case StepKind::kCmaRead: {
      const uint64_t seq = schedule_->descriptor.seq;
      const shm::OpDescriptor& theirs = ctx.segment->rankArea(static_cast<int>(step.first))
                                            ->descriptors[seq % shm::kDescriptorSlots];
      const bool fromRecv = step.n == static_cast<uint32_t>(ScheduleBuilder::PeerBuffer::kRecv);
      const shm::SharedRegion& region = fromRecv ? theirs.recvRegion : theirs.sendRegion;
      if (const char* mapped = peerAllocation(ctx, step, region))
        copyBytes(step.dst, mapped, step.bytes, schedule_->userCopies);
      else
        TRNCCL_RETURN_IF_ERROR(shm::cmaRead(
            ctx.pidOfLocal[step.first], ctx.globalOfLocal[step.first], step.dst,
            (fromRecv ? theirs.recvAddress : theirs.sendAddress) + step.value, step.bytes));
      ctx.traffic[ctx.globalOfLocal[step.first]].countReceived(step.bytes);
      return true;
    }
    case StepKind::kCallback: {
      int localSize = static_cast<int>(ctx.globalOfLocal.size());
      ScheduleBuilder builder(*schedule_, ctx.windows, localSize);
      const PeerMemoryOf memory(*this, ctx);
      builder.setPeerMemory(&memory);
      // Appended steps get fresh group numbers after every existing step.
      TRNCCL_RETURN_IF_ERROR(schedule_->callbacks[step.first](builder));
      chooseCopyKind(ctx);  // the appended steps count too (all-to-all-v plans its rounds here)
      return true;
    }
  }
  return makeError(Code::kInternalError, "unknown schedule step");
}

// Where step's bytes are in this process when the peer's buffer lies in a trncclMemAlloc
// allocation (`region`) this rank can map (nullptr: read with CMA instead).
const char* Operation::peerAllocation(const ExecContext& ctx, const Step& step,
                                      const shm::SharedRegion& region) {
  if (region.id == 0 || !ctx.peerRegions) return nullptr;
  if (region.offset + step.value + step.bytes > region.bytes) return nullptr;
  const char* base =
      ctx.peerRegions->map(static_cast<int>(step.first), ctx.pidOfLocal[step.first], region);
  return base ? base + region.offset + step.value : nullptr;
}

ScheduleBuilder::PeerSendBuffer Operation::PeerMemoryOf::sendBuffer(int q) const {
  ScheduleBuilder::PeerSendBuffer out;
  const uint64_t seq = op_.schedule_->descriptor.seq;
  const int localSize = static_cast<int>(ctx_.globalOfLocal.size());
  if (seq == 0 || q < 0 || q >= localSize || !ctx_.peerRegions) return out;
  const shm::OpDescriptor& theirs =
      ctx_.segment->rankArea(q)->descriptors[seq % shm::kDescriptorSlots];
  if (theirs.seq != seq) return out;
  return region(q, theirs.sendRegion);
}

ScheduleBuilder::PeerSendBuffer Operation::PeerMemoryOf::region(
    int q, const shm::SharedRegion& region) const {
  ScheduleBuilder::PeerSendBuffer out;
  if (q < 0 || q >= static_cast<int>(ctx_.globalOfLocal.size()) || !ctx_.peerRegions ||
      region.id == 0 || region.offset >= region.bytes)
    return out;
  const char* base = ctx_.peerRegions->map(q, ctx_.pidOfLocal[q], region);
  if (!base) return out;
  out.mapped = base + region.offset;
  out.bytes = region.bytes - region.offset;
  return out;
}

void Operation::PeerMemoryOf::countRead(int q, size_t bytes) const {
  if (q >= 0 && q < static_cast<int>(ctx_.globalOfLocal.size()) && q != ctx_.localRank)
    ctx_.traffic[ctx_.globalOfLocal[q]].countReceived(bytes);
}

Result<bool> Operation::llReady(const ExecContext& ctx, const Step& step, size_t lines) {
  const int localSize = static_cast<int>(ctx.globalOfLocal.size());
  for (int q = 0; q < localSize; ++q)
    if (!llLinesReady(ctx, step, q, 0, lines)) return false;
  return true;
}

// Rank q's block of step.bytes to dst + q * bytes, once every rank's block carries the tag.
// Gather: every rank's block starts at its first line, and this rank's own lines count too.
// All-to-all: each peer holds one block per reader (shm::llAllToAllFirstLine).
// Either way this rank's own block comes from step.src, not from its lines.
Result<bool> Operation::gatherLines(const ExecContext& ctx, const Step& step, bool blockPerPeer) {
  const int localSize = static_cast<int>(ctx.globalOfLocal.size());
  const size_t nlines = shm::llLinesFor(step.bytes);
  auto firstLine = [&](int q) {
    return blockPerPeer ? shm::llAllToAllFirstLine(q, ctx.localRank, step.bytes) : 0;
  };
  for (int q = 0; q < localSize; ++q)
    if (!(blockPerPeer && q == ctx.localRank) && !llLinesReady(ctx, step, q, firstLine(q), nlines))
      return false;
  for (int q = 0; q < localSize; ++q) {
    char* out = static_cast<char*>(step.dst) + q * step.bytes;
    if (q == ctx.localRank) {
      if (out != step.src) std::memcpy(out, step.src, step.bytes);
      continue;
    }
    const shm::LLLine* lines = ctx.segment->rankArea(q)->ll[step.first] + firstLine(q);
    for (size_t offset = 0; offset < step.bytes; offset += shm::kLLPayloadBytes)
      std::memcpy(out + offset, lines[offset / shm::kLLPayloadBytes].payload,
                  std::min(shm::kLLPayloadBytes, step.bytes - offset));
  }
  return true;
}

bool Operation::llLinesReady(const ExecContext& ctx, const Step& step, int q, size_t firstLine,
                             size_t lines) {
  const shm::LLLine* peerLines = ctx.segment->rankArea(q)->ll[step.first] + firstLine;
  for (size_t l = 0; l < lines; ++l) {
    uint64_t seen = peerLines[l].tag.load(std::memory_order_acquire);
    if (seen != step.value) {
      spinHint_ = {&peerLines[l].tag, seen};
      blockedOnPeer_ = ctx.globalOfLocal[q];
      blockedOn_ = "waiting for a small-message line of";
      return false;
    }
  }
  return true;
}

static std::string describeCall(const shm::OpDescriptor& d) {
  std::string text = strformat("%s(count=%llu", collName(static_cast<CollKind>(d.kind)),
                               static_cast<unsigned long long>(d.count));
  if (d.dtype >= 0) text += strformat(", %s", dtypeName(static_cast<trncclDataType_t>(d.dtype)));
  if (d.op >= 0) text += strformat(", %s", redOpName(static_cast<trncclRedOp_t>(d.op)));
  if (d.root >= 0) text += strformat(", root=%d", d.root);
  return text + ")";
}

static Status mismatchError(const ExecContext& ctx, const shm::OpDescriptor& mine,
                            const shm::OpDescriptor& theirs, int peerLocal) {
  return makeError(
      Code::kInvalidUsage,
      "mismatched calls as operation #%llu of this communicator: rank %d called %s "
      "but rank %d called %s; every rank must make the same collective calls in "
      "the same order with the same count, type, op and root",
      static_cast<unsigned long long>(mine.seq), ctx.rank, describeCall(mine).c_str(),
      ctx.globalOfLocal[peerLocal],
      theirs.seq == mine.seq ? describeCall(theirs).c_str() : "a different sequence of operations");
}

Status Operation::probeMismatch(const ExecContext& ctx, int peerLocal) const {
  if (!schedule_ || schedule_->descriptor.seq == 0 || peerLocal < 0) return Status::ok();
  const shm::OpDescriptor& mine = schedule_->descriptor;
  shm::RankArea* area = ctx.segment->rankArea(peerLocal);
  // The peer may be publishing right now: only a descriptor whose own signature equals the
  // signature read before it is a consistent snapshot worth judging.
  uint64_t published =
      area->signatures[mine.seq % shm::kSignatureSlots].load(std::memory_order_acquire);
  shm::OpDescriptor theirs = area->descriptors[mine.seq % shm::kDescriptorSlots];
  if (theirs.seq != mine.seq || callSignature(theirs) != published) return Status::ok();
  if (published == schedule_->signature) return Status::ok();
  return mismatchError(ctx, mine, theirs, peerLocal);
}

Status Operation::checkDescriptors(const ExecContext& ctx) {
  const shm::OpDescriptor& mine = schedule_->descriptor;
  int localSize = static_cast<int>(ctx.globalOfLocal.size());
  const uint64_t signature = schedule_->signature;
  for (int peer = 0; peer < localSize; ++peer) {
    if (peer == ctx.localRank) continue;
    shm::RankArea* area = ctx.segment->rankArea(peer);
    if (area->signatures[mine.seq % shm::kSignatureSlots].load(std::memory_order_acquire) ==
        signature)
      continue;
    const shm::OpDescriptor& theirs =
        ctx.segment->rankArea(peer)->descriptors[mine.seq % shm::kDescriptorSlots];
    if (theirs.seq != mine.seq || theirs.kind != mine.kind || theirs.count != mine.count ||
        theirs.dtype != mine.dtype || theirs.op != mine.op || theirs.root != mine.root) {
      return mismatchError(ctx, mine, theirs, peer);
    }
  }
  return Status::ok();
}

}  // namespace trnccl
