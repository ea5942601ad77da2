#include "transports/efa/efa_transport.hpp"

#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/strformat.hpp"

namespace trnccl::efa {

namespace {

constexpr size_t kFragBytes = 512 << 10;
constexpr uint32_t kMaxFragments = 4096;  // 12 tag bits
constexpr uint32_t kMaxStagedPerMessage = 8;
constexpr size_t kMrCacheEntries = 1024;

size_t fragmentBytes(size_t bytes) {
  return std::max(kFragBytes, (bytes + kMaxFragments - 1) / kMaxFragments);
}

// 20 bits of sender rank, 32 bits of per-pair message sequence, 12 bits of fragment index.
uint64_t makeTag(int sender, uint32_t seq, uint32_t fragment) {
  return (static_cast<uint64_t>(sender) & 0xFFFFF) << 44 | static_cast<uint64_t>(seq) << 12 |
         fragment;
}

std::string mrModeText(uint64_t mode) {
  static const std::pair<uint64_t, const char*> names[] = {
      {FI_MR_LOCAL, "local"},         {FI_MR_VIRT_ADDR, "virt_addr"},
      {FI_MR_ALLOCATED, "allocated"}, {FI_MR_PROV_KEY, "prov_key"},
      {FI_MR_ENDPOINT, "endpoint"},   {FI_MR_RAW, "raw"},
      {FI_MR_RMA_EVENT, "rma_event"}, {FI_MR_HMEM, "hmem"}};
  std::string text;
  for (auto [bit, name] : names)
    if (mode & bit) {
      if (!text.empty()) text += '|';
      text += name;
    }
  return text.empty() ? "none" : text;
}

// The message size as remote CQ data, cut to what the provider carries (EFA: 4 bytes).
uint64_t sizeTag(size_t bytes, const Rail& rail) {
  return rail.cqDataBytes >= 8 ? bytes : (bytes & 0xFFFFFFFFu);
}

}  // namespace

struct FragmentContext {
  fi_context2 context;  // first: the provider's scratch space (FI_CONTEXT2 mode)
  Message* message = nullptr;
  int rail = 0;
  size_t offset = 0;
  size_t bytes = 0;
  char* staging = nullptr;  // receives that reduce land here first
  MrCache::Entry* stagingMr = nullptr;
};

struct Message {
  int peer = -1;
  bool send = false;
  bool staged = false;
  uint32_t seq = 0;
  size_t bytes = 0;
  size_t fragBytes = 0;
  uint32_t fragments = 0;
  uint32_t posted = 0;
  uint32_t completed = 0;
  uint32_t applied = 0;             // staged fragments folded into the destination
  std::vector<MrCache::Entry*> mr;  // per rail: the whole user buffer
  std::vector<std::unique_ptr<FragmentContext>> contexts;
  std::vector<FragmentContext*> arrived;  // staged, not yet applied
  Status error;
  bool orphaned = false;  // its operation failed; freed once the provider is done with it
};

Result<std::unique_ptr<EfaTransport>> EfaTransport::open(int myRank, int nranks,
                                                         const std::string& provider, int rails) {
  std::unique_ptr<EfaTransport> t(new EfaTransport(myRank, nranks));
  auto choice = chooseProvider(provider, rails);
  TRNCCL_RETURN_IF_ERROR(choice.status());
  t->choice_ = std::move(choice.value());
  for (fi_info* info : t->choice_.use) {
    auto rail = openRail(info);
    TRNCCL_RETURN_IF_ERROR(rail.status());
    t->rails_.push_back(std::move(rail.value()));
    t->caches_.push_back(std::make_unique<MrCache>(*t->rails_.back(), kMrCacheEntries));
  }
  t->sendsInFlight_.assign(t->rails_.size(), 0);
  t->recvsInFlight_.assign(t->rails_.size(), 0);
  t->fragmentsPerRail_.assign(t->rails_.size(), 0);
  t->addrOf_.assign(t->rails_.size(), std::vector<fi_addr_t>(nranks, FI_ADDR_NOTAVAIL));
  t->pairRails_.assign(nranks, 0);
  t->sendSeq_.assign(nranks, 0);
  t->recvSeq_.assign(nranks, 0);
  return t;
}

EfaTransport::EfaTransport(int myRank, int nranks) : myRank_(myRank), nranks_(nranks) {}

EfaTransport::~EfaTransport() {
  // Endpoints first (cancelling what is still posted), then the registrations and staging
  // buffers those operations pointed at, then the rest of each rail.
  for (auto& rail : rails_) rail->ep.reset();
  for (auto& m : messages_)
    for (auto& fc : m->contexts) delete[] fc->staging;
  messages_.clear();
  caches_.clear();
  rails_.clear();
}

std::string EfaTransport::addressBlob() const {
  const std::string provider = rails_.front()->info->fabric_attr->prov_name;
  std::string blob(1, static_cast<char>(provider.size()));
  blob += provider;
  blob += static_cast<char>(rails_.size());
  for (const auto& rail : rails_) {
    uint16_t length = static_cast<uint16_t>(rail->address.size());
    blob.append(reinterpret_cast<const char*>(&length), 2);
    blob += rail->address;
  }
  return blob;
}

Status EfaTransport::connect(const std::vector<std::string>& blobs) {
  std::vector<std::vector<std::string>> perRail(rails_.size(), std::vector<std::string>(nranks_));
  for (int peer = 0; peer < nranks_ && peer < static_cast<int>(blobs.size()); ++peer) {
    const std::string& blob = blobs[peer];
    if (peer == myRank_ || blob.empty()) continue;
    const size_t nameBytes = static_cast<unsigned char>(blob[0]);
    if (blob.size() < 2 + nameBytes)
      return makeError(Code::kRemoteError, "rank %d published a malformed efa address", peer);
    const std::string theirProvider = blob.substr(1, nameBytes);
    const std::string myProvider = rails_.front()->info->fabric_attr->prov_name;
    if (theirProvider != myProvider)
      return makeError(Code::kInvalidUsage,
                       "rank %d opened libfabric provider '%s' but rank %d opened '%s'; every "
                       "rank must use the same one (set TRNCCL_FI_PROVIDER alike, and check "
                       "that the provider exists on every node)",
                       peer, theirProvider.c_str(), myRank_, myProvider.c_str());
    size_t theirRails = static_cast<unsigned char>(blob[1 + nameBytes]);
    size_t at = 2 + nameBytes;
    std::vector<std::string> addresses;
    for (size_t r = 0; r < theirRails; ++r) {
      uint16_t length = 0;
      if (at + 2 > blob.size()) break;
      std::memcpy(&length, blob.data() + at, 2);
      at += 2;
      if (at + length > blob.size()) break;
      addresses.push_back(blob.substr(at, length));
      at += length;
    }
    if (addresses.size() != theirRails || theirRails == 0)
      return makeError(Code::kRemoteError, "rank %d published a malformed efa address", peer);
    pairRails_[peer] = static_cast<int>(std::min(rails_.size(), theirRails));
    for (int r = 0; r < pairRails_[peer]; ++r) perRail[r][peer] = addresses[r];
  }
  for (size_t r = 0; r < rails_.size(); ++r) {
    auto inserted = insertAddresses(*rails_[r], perRail[r]);
    TRNCCL_RETURN_IF_ERROR(inserted.status());
    addrOf_[r] = std::move(inserted.value());
  }
  return Status::ok();
}

std::string EfaTransport::describe() const {
  const fi_info* info = rails_.front()->info;
  std::string domains;
  for (const auto& rail : rails_) {
    if (!domains.empty()) domains += ',';
    domains += rail->info->domain_attr->name;
  }
  return strformat(
      "provider %s, fabric %s, %zu rail(s) on domain(s) %s, MR mode %s, %s, inject "
      "%zu B, %zu outstanding sends and %zu receives per rail, size check %s",
      info->fabric_attr->prov_name, info->fabric_attr->name, rails_.size(), domains.c_str(),
      mrModeText(info->domain_attr->mr_mode).c_str(),
      choice_.rma ? "FI_RMA offered (not used yet)" : "no FI_RMA", rails_.front()->injectBytes,
      rails_.front()->maxSends, rails_.front()->maxRecvs,
      rails_.front()->cqDataBytes >= 4 ? "in remote CQ data" : "by length only");
}

void EfaTransport::shutdown() {
  for (auto& rail : rails_) rail->ep.reset();
  shutDown_ = true;
}

void EfaTransport::drain(double seconds) {
  if (shutDown_) return;
  auto pending = [&] {
    for (size_t r = 0; r < rails_.size(); ++r)
      if (sendsInFlight_[r] > 0) return true;
    return false;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (pending() && std::chrono::steady_clock::now() < deadline)
    if (!pollCompletions().isOk()) return;
}

size_t EfaTransport::registrations() const {
  size_t n = 0;
  for (const auto& c : caches_) n += c->registrations();
  return n;
}

size_t EfaTransport::registrationHits() const {
  size_t n = 0;
  for (const auto& c : caches_) n += c->hits();
  return n;
}

char* EfaTransport::takeStaging(size_t bytes) {
  for (auto it = staging_.begin(); it != staging_.end(); ++it)
    if (it->first >= bytes) {
      char* buffer = it->second.release();
      staging_.erase(it);
      return buffer;
    }
  return new char[std::max(bytes, kFragBytes)];
}

void EfaTransport::returnStaging(char* buffer, size_t bytes) {
  staging_.emplace_back(std::max(bytes, kFragBytes), std::unique_ptr<char[]>(buffer));
}

Status EfaTransport::pollCompletions() {
  for (size_t r = 0; r < rails_.size(); ++r) {
    fid_cq* cq = rails_[r]->cq.get();
    for (;;) {
      fi_cq_tagged_entry entries[16];
      ssize_t n = fi_cq_read(cq, entries, 16);
      if (n == -FI_EAGAIN) break;
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        if (fi_cq_readerr(cq, &err, 0) != 1) break;
        auto* fc = static_cast<FragmentContext*>(err.op_context);
        char detail[256] = {};
        const char* text = fi_cq_strerror(cq, err.prov_errno, err.err_data, detail, sizeof(detail));
        if (!fc) return makeError(Code::kSystemError, "libfabric completion error: %s", text);
        --(fc->message->send ? sendsInFlight_ : recvsInFlight_)[fc->rail];
        Message& m = *fc->message;
        ++m.completed;
        if (m.error.isOk()) {
          if (err.err == FI_ETRUNC)
            m.error = makeError(Code::kInvalidUsage,
                                "rank %d sent more than the %zu bytes rank %d expected "
                                "(mismatched count or datatype between the two calls)",
                                m.peer, m.bytes, myRank_);
          else
            m.error = makeError(Code::kRemoteError,
                                "%s of %zu bytes %s rank %d over libfabric (%s) failed: %s (%s)",
                                m.send ? "send" : "receive", m.bytes, m.send ? "to" : "from",
                                m.peer, rails_[r]->info->fabric_attr->prov_name,
                                fi_strerror(err.err), text ? text : "");
        }
        continue;
      }
      if (n < 0) return makeError(Code::kSystemError, "%s", fiError("fi_cq_read", n).c_str());
      for (ssize_t i = 0; i < n; ++i) {
        auto* fc = static_cast<FragmentContext*>(entries[i].op_context);
        Message& m = *fc->message;
        --(m.send ? sendsInFlight_ : recvsInFlight_)[fc->rail];
        ++m.completed;
        // Every fragment carries its message's size (remote CQ data), so a sender that sent a
        // different size is caught even when the fragment itself fits exactly.
        const Rail& rail = *rails_[r];
        const bool sizeKnown = !m.send && rail.cqDataBytes >= 4;
        const bool sizeDiffers = sizeKnown && (!(entries[i].flags & FI_REMOTE_CQ_DATA) ||
                                               entries[i].data != sizeTag(m.bytes, rail));
        if (!m.send && (entries[i].len != fc->bytes || sizeDiffers) && m.error.isOk())
          m.error = makeError(Code::kInvalidUsage,
                              "rank %d sent a message of a different size than the %zu bytes "
                              "rank %d expected (mismatched count or datatype between the two "
                              "calls)",
                              m.peer, m.bytes, myRank_);
        if (m.staged) m.arrived.push_back(fc);
      }
    }
  }
  // Messages whose operation failed are freed once the provider has let go of them.
  messages_.remove_if([&](const std::unique_ptr<Message>& m) {
    if (!m->orphaned || m->completed < m->posted) return false;
    for (size_t r = 0; r < m->mr.size(); ++r) caches_[r]->release(m->mr[r]);
    for (auto& fc : m->contexts)
      if (fc->staging) {
        caches_[fc->rail]->release(fc->stagingMr);
        returnStaging(fc->staging, fc->bytes);
        fc->staging = nullptr;
      }
    return true;
  });
  return Status::ok();
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
  m->seq = send ? sendSeq_[op.peer]++ : recvSeq_[op.peer]++;
  m->staged = !send && op.action.kind == RecvAction::Kind::kReduce;
  const int railsUsed = std::min<int>(pairRails_[op.peer], static_cast<int>(m->fragments));
  m->mr.assign(railsUsed, nullptr);
  if (op.bytes > 0 && !m->staged) {
    const void* buffer = send ? op.src : op.dst;
    for (int r = 0; r < railsUsed; ++r) {
      auto entry = caches_[r]->acquire(buffer, op.bytes);
      if (!entry.isOk()) {
        for (int q = 0; q < r; ++q) caches_[q]->release(m->mr[q]);
        return entry.status();
      }
      m->mr[r] = entry.value();
    }
  }
  messages_.push_back(std::move(owned));
  op.transportState = m;
  op.started = true;
  return m;
}

Result<bool> EfaTransport::postFragments(Message& m, TransferOp& op) {
  const int railsUsed = static_cast<int>(m.mr.size());
  while (m.posted < m.fragments) {
    if (m.staged && m.posted - m.applied >= kMaxStagedPerMessage) break;
    const uint32_t index = m.posted;
    const int r = static_cast<int>(index % railsUsed);
    Rail& rail = *rails_[r];
    if (m.send ? sendsInFlight_[r] >= rail.maxSends : recvsInFlight_[r] >= rail.maxRecvs) break;
    const size_t offset = static_cast<size_t>(index) * m.fragBytes;
    const size_t bytes = offset < m.bytes ? std::min(m.fragBytes, m.bytes - offset) : 0;
    const uint64_t tag = makeTag(m.send ? myRank_ : m.peer, m.seq, index);
    const fi_addr_t addr = addrOf_[r][m.peer];
    ssize_t rc;
    // The first message to a peer goes with a completion: the provider may still be setting
    // up the connection, and an injected message would then wait for progress nobody makes
    // if this rank's next call never touches libfabric.
    if (m.send && bytes <= rail.injectBytes && m.seq > 0) {
      // Small fragments are copied out by the provider at once: no completion to wait for.
      const void* data = static_cast<const char*>(op.src) + offset;
      rc = rail.cqDataBytes >= 4
               ? fi_tinjectdata(rail.ep.get(), data, bytes, sizeTag(m.bytes, rail), addr, tag)
               : fi_tinject(rail.ep.get(), data, bytes, addr, tag);
      if (rc == 0) {
        ++m.posted;
        ++m.completed;
        ++fragmentsPerRail_[r];
        continue;
      }
    } else {
      auto fc = std::make_unique<FragmentContext>();
      fc->message = &m;
      fc->rail = r;
      fc->offset = offset;
      fc->bytes = bytes;
      if (m.send) {
        const void* data = static_cast<const char*>(op.src) + offset;
        void* desc = MrCache::descriptor(m.mr[r]);
        rc = rail.cqDataBytes >= 4
                 ? fi_tsenddata(rail.ep.get(), data, bytes, desc, sizeTag(m.bytes, rail), addr, tag,
                                &fc->context)
                 : fi_tsend(rail.ep.get(), data, bytes, desc, addr, tag, &fc->context);
      } else {
        char* target = static_cast<char*>(op.dst) + offset;
        void* desc = MrCache::descriptor(m.mr[r]);
        if (m.staged && bytes > 0) {
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
        rc = fi_trecv(rail.ep.get(), bytes ? target : nullptr, bytes, desc, addr, tag, 0,
                      &fc->context);
        if (rc != 0 && fc->staging) {
          caches_[r]->release(fc->stagingMr);
          returnStaging(fc->staging, bytes);
        }
      }
      if (rc == 0) {
        ++m.posted;
        ++(m.send ? sendsInFlight_ : recvsInFlight_)[r];
        ++fragmentsPerRail_[r];
        m.contexts.push_back(std::move(fc));
        continue;
      }
    }
    if (rc == -FI_EAGAIN) {
      // The provider's queues are full: progress completions now, post the rest next pass.
      TRNCCL_RETURN_IF_ERROR(pollCompletions());
      return false;
    }
    return makeError(Code::kSystemError, "rank %d %s rank %d over %s: %s", myRank_,
                     m.send ? "sending to" : "receiving from", m.peer,
                     rail.info->fabric_attr->prov_name,
                     fiError(m.send ? "fi_tsend" : "fi_trecv", rc).c_str());
  }
  return true;
}

void EfaTransport::drop(Message* m, TransferOp& op) {
  op.transportState = nullptr;
  m->orphaned = true;  // pollCompletions frees it when nothing is outstanding
}

Result<bool> EfaTransport::finish(Message& m, TransferOp& op) {
  if (!m.error.isOk()) {
    Status error = m.error;
    drop(&m, op);
    return error;
  }
  for (FragmentContext* fc : m.arrived) {
    if (fc->staging) {  // (an empty message has nothing to fold in)
      applyRecvAction(op, fc->offset, fc->staging, fc->bytes);
      caches_[fc->rail]->release(fc->stagingMr);
      returnStaging(fc->staging, fc->bytes);
      fc->staging = nullptr;
    }
    ++m.applied;
  }
  m.arrived.clear();
  if (m.completed < m.fragments || (m.staged && m.applied < m.fragments)) return false;
  for (size_t r = 0; r < m.mr.size(); ++r) caches_[r]->release(m.mr[r]);
  op.done = op.bytes;
  op.transportState = nullptr;
  messages_.remove_if([&](const std::unique_ptr<Message>& owned) { return owned.get() == &m; });
  return true;
}

Result<bool> EfaTransport::progressSend(TransferOp& op) {
  if (shutDown_)
    return makeError(Code::kInvalidUsage, "the efa transport was shut down after an error");
  TRNCCL_RETURN_IF_ERROR(pollCompletions());
  Message* m = static_cast<Message*>(op.transportState);
  if (!m) {
    auto started = start(op, /*send=*/true);
    TRNCCL_RETURN_IF_ERROR(started.status());
    m = started.value();
  }
  auto posted = postFragments(*m, op);
  if (!posted.isOk()) {
    drop(m, op);
    return posted.status();
  }
  return finish(*m, op);
}

Result<bool> EfaTransport::progressRecv(TransferOp& op) {
  if (shutDown_)
    return makeError(Code::kInvalidUsage, "the efa transport was shut down after an error");
  TRNCCL_RETURN_IF_ERROR(pollCompletions());
  Message* m = static_cast<Message*>(op.transportState);
  if (!m) {
    auto started = start(op, /*send=*/false);
    TRNCCL_RETURN_IF_ERROR(started.status());
    m = started.value();
  }
  auto result = finish(*m, op);  // fold in staged fragments first: frees room to post more
  if (!result.isOk() || result.value()) return result;
  auto posted = postFragments(*m, op);
  if (!posted.isOk()) {
    drop(m, op);
    return posted.status();
  }
  return finish(*m, op);
}

}  // namespace trnccl::efa
