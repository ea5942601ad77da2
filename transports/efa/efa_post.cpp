// Posting a message's libfabric operations: eager fragments (tagged sends and receives,
// striped over the rails) and the rendezvous protocol (announce, reads, done). Every post
// stops at the rail's budget or at FI_EAGAIN and resumes on the next progress pass.
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <cstring>

#include "transports/efa/efa_transport.hpp"

namespace trnccl::efa {

Result<int> ControlSlots::take(MrCache& cache) {
  if (free_.empty()) {
    Chunk chunk;
    chunk.memory.reset(new char[kSlotBytes * kSlotsPerChunk]);
    auto entry = cache.acquire(chunk.memory.get(), kSlotBytes * kSlotsPerChunk);
    TRNCCL_RETURN_IF_ERROR(entry.status());
    chunk.mr = entry.value();  // held for the transport's life: never evicted
    const int first = static_cast<int>(chunks_.size() * kSlotsPerChunk);
    chunks_.push_back(std::move(chunk));
    for (int i = static_cast<int>(kSlotsPerChunk) - 1; i >= 0; --i) free_.push_back(first + i);
  }
  const int slot = free_.back();
  free_.pop_back();
  return slot;
}

Result<Message*> EfaTransport::start(TransferOp& op, bool send) {
  if (op.peer < 0 || op.peer >= nranks_ || pairRails_[op.peer] == 0)
    return makeError(Code::kInternalError, "efa transport has no address for rank %d", op.peer);
  auto owned = std::make_unique<Message>();
  Message* m = owned.get();
  m->peer = op.peer;
  m->send = send;
  m->bytes = op.bytes;
  m->fragBytes = fragmentBytes(op.bytes);
  m->fragments =
      static_cast<uint32_t>(std::max<size_t>(1, (op.bytes + m->fragBytes - 1) / m->fragBytes));
  if (!send && op.action.kind == RecvAction::Kind::kReduce) {
    // Straight into the destination when that cannot overwrite the local operand before it is
    // read: no staging copy, and the reduction then finds the fragment already in cache.
    const auto* dst = static_cast<const char*>(op.dst);
    const auto* local = static_cast<const char*>(op.action.local);
    const bool overlap = local < dst + op.bytes && dst < local + op.bytes;
    m->staged = overlap;
    m->reducesInDestination = !overlap;
  }
  const size_t threshold = pairRendezvous_[op.peer];
  m->rendezvous = threshold > 0 && op.bytes >= threshold;
  const int railsUsed = std::min<int>(pairRails_[op.peer], static_cast<int>(m->fragments));
  m->mr.assign(railsUsed, nullptr);
  if (op.bytes > 0 && !m->staged) {
    const void* buffer = send ? op.src : op.dst;
    for (int r = 0; r < railsUsed; ++r) {
      auto entry = caches_[r]->acquire(buffer, op.bytes, cacheUserBuffers_);
      if (!entry.isOk()) {
        for (int q = 0; q < r; ++q) caches_[q]->release(m->mr[q]);
        return entry.status();
      }
      m->mr[r] = entry.value();
    }
  }
  // The sequence number is taken last: a message that failed to start used none, so the
  // pair's numbering stays aligned with the peer's.
  m->seq = send ? sendSeq_[op.peer]++ : recvSeq_[op.peer]++;
  messages_.push_back(std::move(owned));
  op.transportState = m;
  op.started = true;
  return m;
}

// Both ends of a pair post the operations that match on the pair's stream in the same order,
// message by message (sequence order) and fragment by fragment: a message waits until the
// one before it to the same peer, same direction, has all of those posted. A provider that
// reads each connection in order (net) waits for a receive matching what comes next without
// reading further; had a pass filled the budget with a later message's receives while the
// stream held an earlier message's fragment first, neither could ever move. What goes on the
// stream in order: every eager fragment; for a rendezvous, the sender's "done" receive and
// announcement, the receiver's announcement receive (its reads and "done" are not matched
// against the sender's receives in that order, so they may come later).
Result<bool> EfaTransport::post(Message& m, TransferOp& op) {
  uint32_t& next = (m.send ? nextSendToPost_ : nextRecvToPost_)[m.peer];
  if (!m.streamPosted && m.seq != next) return false;  // not its turn yet
  Result<bool> posted = !m.rendezvous ? postFragments(m, op)
                        : m.send      ? postRendezvousSend(m, op)
                                      : postRendezvousRecv(m, op);
  if (!m.streamPosted) {
    const bool done = !m.rendezvous ? m.posted == m.fragments : m.ctrlPosted >= (m.send ? 2 : 1);
    if (done) {
      m.streamPosted = true;
      ++next;
    }
  }
  return posted;
}

template <typename Call>
Result<bool> EfaTransport::postOne(Message& m, std::unique_ptr<FragmentContext> fc,
                                   const char* what, Call call) {
  const int r = fc->rail;
  const bool budgetLeft =
      fc->tx ? sendsInFlight_[r] < rails_[r]->maxSends : recvsInFlight_[r] < rails_[r]->maxRecvs;
  const ssize_t rc = budgetLeft ? call(fc.get()) : -FI_EAGAIN;
  if (rc == 0) {
    ++(fc->tx ? sendsInFlight_ : recvsInFlight_)[r];
    const bool control = isControl(fc->kind);
    ++(control ? m.ctrlPosted : m.posted);
    if (!control) ++fragmentsPerRail_[r];
    m.contexts.push_back(std::move(fc));
    return true;
  }
  if (fc->staging) {
    caches_[r]->release(fc->stagingMr);
    returnStaging(fc->staging, fc->bytes);
  }
  if (rc == -FI_EAGAIN) {
    // Our budget or the provider's queues are full: progress completions now, post the rest
    // on the next pass.
    TRNCCL_RETURN_IF_ERROR(pollCompletions());
    return false;
  }
  return makeError(Code::kSystemError, "rank %d %s rank %d over %s: %s", myRank_,
                   m.send ? "sending to" : "receiving from", m.peer,
                   rails_[r]->info->fabric_attr->prov_name, fiError(what, rc).c_str());
}

Result<bool> EfaTransport::postFragments(Message& m, TransferOp& op) {
  const int railsUsed = static_cast<int>(m.mr.size());
  while (m.posted < m.fragments) {
    if (m.staged && m.posted - m.applied >= kMaxStagedPerMessage) break;
    const uint32_t index = m.posted;
    const int r = static_cast<int>(index % railsUsed);
    Rail& rail = *rails_[r];
    const size_t offset = static_cast<size_t>(index) * m.fragBytes;
    const size_t bytes = offset < m.bytes ? std::min(m.fragBytes, m.bytes - offset) : 0;
    const uint64_t tag = makeTag(m.send ? myRank_ : m.peer, m.seq, index);
    const fi_addr_t addr = addrOf_[r][m.peer];
    // The first message to a peer goes with a completion: the provider may still be setting
    // up the connection, and an injected message would then wait for progress nobody makes
    // if this rank's next call never touches libfabric.
    if (m.send && bytes <= rail.injectBytes && m.seq > 0) {
      // Small fragments are copied out by the provider at once: no completion to wait for.
      const void* data = static_cast<const char*>(op.src) + offset;
      ssize_t rc = rail.cqDataBytes >= 4 ? fi_tinjectdata(rail.ep.get(), data, bytes,
                                                          sizeTag(m.bytes, rail), addr, tag)
                                         : fi_tinject(rail.ep.get(), data, bytes, addr, tag);
      if (rc == 0) {
        ++m.posted;
        ++m.completed;
        ++fragmentsPerRail_[r];
        continue;
      }
      if (rc == -FI_EAGAIN) {
        TRNCCL_RETURN_IF_ERROR(pollCompletions());
        return false;
      }
      return makeError(Code::kSystemError, "rank %d sending to rank %d over %s: %s", myRank_,
                       m.peer, rail.info->fabric_attr->prov_name,
                       fiError("fi_tinject", rc).c_str());
    }
    auto fc = std::make_unique<FragmentContext>();
    fc->message = &m;
    fc->rail = r;
    fc->offset = offset;
    fc->bytes = bytes;
    fc->tx = m.send;
    Result<bool> posted = false;
    if (m.send) {
      const void* data = static_cast<const char*>(op.src) + offset;
      void* desc = MrCache::descriptor(m.mr[r]);
      posted = postOne(m, std::move(fc), "fi_tsend", [&](FragmentContext* c) {
        return rail.cqDataBytes >= 4
                   ? fi_tsenddata(rail.ep.get(), data, bytes, desc, sizeTag(m.bytes, rail), addr,
                                  tag, &c->context)
                   : fi_tsend(rail.ep.get(), data, bytes, desc, addr, tag, &c->context);
      });
    } else {
      char* target = static_cast<char*>(op.dst) + offset;
      void* desc = MrCache::descriptor(m.mr[r]);
      if (m.staged && bytes > 0) {
        if (recvsInFlight_[r] >= rail.maxRecvs) return false;
        fc->staging = takeStaging(bytes);
        auto entry = caches_[r]->acquire(fc->staging, bytes);
        if (!entry.isOk()) {
          returnStaging(fc->staging, bytes);
          return entry.status();
        }
        fc->stagingMr = entry.value();
        target = fc->staging;
        desc = MrCache::descriptor(fc->stagingMr);
      }
      posted = postOne(m, std::move(fc), "fi_trecv", [&](FragmentContext* c) {
        return fi_trecv(rail.ep.get(), bytes ? target : nullptr, bytes, desc, addr, tag, 0,
                        &c->context);
      });
    }
    TRNCCL_RETURN_IF_ERROR(posted.status());
    if (!posted.value()) return false;
  }
  return true;
}

// Sender: post the receive for the receiver's "done" first (it may come quickly), then the
// announcement of where the data is. The user buffer stays untouched until "done" arrives.
Result<bool> EfaTransport::postRendezvousSend(Message& m, TransferOp& op) {
  Rail& rail = *rails_[0];
  const fi_addr_t addr = addrOf_[0][m.peer];
  if (m.ctrlPosted == 0) {
    auto fc = std::make_unique<FragmentContext>();
    fc->message = &m;
    fc->kind = OpKind::kDone;
    const uint64_t tag = makeTag(m.peer, m.seq, 0, /*control=*/true);
    auto posted = postOne(m, std::move(fc), "fi_trecv", [&](FragmentContext* c) {
      return fi_trecv(rail.ep.get(), nullptr, 0, nullptr, addr, tag, 0, &c->context);
    });
    if (!posted.isOk() || !posted.value()) return posted;
  }
  if (m.ctrlPosted == 1) {
    if (m.slot < 0) {
      auto slot = slots_.take(*caches_[0]);
      TRNCCL_RETURN_IF_ERROR(slot.status());
      m.slot = slot.value();
      AnnounceHeader header;
      header.bytes = m.bytes;
      header.rails = static_cast<uint32_t>(m.mr.size());
      char* text = slots_.at(m.slot);
      std::memcpy(text, &header, sizeof(header));
      const bool virtualAddresses = rail.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR;
      for (size_t r = 0; r < m.mr.size(); ++r) {
        const auto base = reinterpret_cast<uintptr_t>(op.src);
        RemoteBuffer where{virtualAddresses ? base : base - m.mr[r]->start,
                           fi_mr_key(m.mr[r]->mr.get())};
        std::memcpy(text + sizeof(header) + r * sizeof(where), &where, sizeof(where));
      }
    }
    const size_t length = sizeof(AnnounceHeader) + m.mr.size() * sizeof(RemoteBuffer);
    auto fc = std::make_unique<FragmentContext>();
    fc->message = &m;
    fc->kind = OpKind::kAnnounce;
    fc->tx = true;
    const uint64_t tag = makeTag(myRank_, m.seq, 0);
    const char* text = slots_.at(m.slot);
    void* desc = slots_.descriptor(m.slot);
    auto posted = postOne(m, std::move(fc), "fi_tsend", [&](FragmentContext* c) {
      return rail.cqDataBytes >= 4
                 ? fi_tsenddata(rail.ep.get(), text, length, desc, sizeTag(m.bytes, rail), addr,
                                tag, &c->context)
                 : fi_tsend(rail.ep.get(), text, length, desc, addr, tag, &c->context);
    });
    if (!posted.isOk() || !posted.value()) return posted;
  }
  return true;
}

// Receiver: take the announcement, pull the fragments with fi_read (into place, or into
// staging buffers a few at a time when the receive reduces), then tell the sender it is done.
Result<bool> EfaTransport::postRendezvousRecv(Message& m, TransferOp& op) {
  Rail& rail0 = *rails_[0];
  if (m.ctrlPosted == 0) {
    if (m.slot < 0) {
      auto slot = slots_.take(*caches_[0]);
      TRNCCL_RETURN_IF_ERROR(slot.status());
      m.slot = slot.value();
    }
    auto fc = std::make_unique<FragmentContext>();
    fc->message = &m;
    fc->kind = OpKind::kAnnounce;
    fc->bytes = ControlSlots::kSlotBytes;
    const uint64_t tag = makeTag(m.peer, m.seq, 0);
    char* text = slots_.at(m.slot);
    void* desc = slots_.descriptor(m.slot);
    const fi_addr_t addr = addrOf_[0][m.peer];
    auto posted = postOne(m, std::move(fc), "fi_trecv", [&](FragmentContext* c) {
      return fi_trecv(rail0.ep.get(), text, ControlSlots::kSlotBytes, desc, addr, tag, 0,
                      &c->context);
    });
    if (!posted.isOk() || !posted.value()) return posted;
  }
  if (!m.announced) return false;
  const int railsUsed = std::min(static_cast<int>(m.mr.size()), static_cast<int>(m.remote.size()));
  while (m.posted < m.fragments) {
    if (m.staged && m.posted - m.applied >= kMaxStagedPerMessage) break;
    const uint32_t index = m.posted;
    const int r = static_cast<int>(index % railsUsed);
    Rail& rail = *rails_[r];
    if (sendsInFlight_[r] >= rail.maxSends) break;
    auto fc = std::make_unique<FragmentContext>();
    fc->message = &m;
    fc->kind = OpKind::kRead;
    fc->tx = true;
    fc->rail = r;
    fc->offset = static_cast<size_t>(index) * m.fragBytes;
    fc->bytes = std::min(m.fragBytes, m.bytes - fc->offset);
    char* target = static_cast<char*>(op.dst) + fc->offset;
    void* desc = MrCache::descriptor(m.mr[r]);
    if (m.staged) {
      fc->staging = takeStaging(fc->bytes);
      auto entry = caches_[r]->acquire(fc->staging, fc->bytes);
      if (!entry.isOk()) {
        returnStaging(fc->staging, fc->bytes);
        return entry.status();
      }
      fc->stagingMr = entry.value();
      target = fc->staging;
      desc = MrCache::descriptor(fc->stagingMr);
    }
    const size_t bytes = fc->bytes;
    const uint64_t remoteAddr = m.remote[r].addr + fc->offset;
    const uint64_t key = m.remote[r].key;
    const fi_addr_t addr = addrOf_[r][m.peer];
    auto posted = postOne(m, std::move(fc), "fi_read", [&](FragmentContext* c) {
      return fi_read(rail.ep.get(), target, bytes, desc, addr, remoteAddr, key, &c->context);
    });
    if (!posted.isOk() || !posted.value()) return posted;
  }
  if (m.completed < m.fragments || (m.reduces() && m.applied < m.fragments)) return false;
  if (m.ctrlPosted == 1) {
    auto fc = std::make_unique<FragmentContext>();
    fc->message = &m;
    fc->kind = OpKind::kDone;
    fc->tx = true;
    const uint64_t tag = makeTag(myRank_, m.seq, 0, /*control=*/true);
    const fi_addr_t addr = addrOf_[0][m.peer];
    auto posted = postOne(m, std::move(fc), "fi_tsend", [&](FragmentContext* c) {
      return fi_tsend(rail0.ep.get(), nullptr, 0, nullptr, addr, tag, &c->context);
    });
    if (!posted.isOk() || !posted.value()) return posted;
  }
  return true;
}

}  // namespace trnccl::efa
