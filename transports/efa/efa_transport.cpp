#include "transports/efa/efa_transport.hpp"

#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/env.hpp"
#include "core/log.hpp"
#include "core/strformat.hpp"

namespace trnccl::efa {

namespace {

constexpr size_t kMrCacheEntries = 1024;

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

// What a failed ofi_rxm transport leaves behind (EfaTransport::fail): its rails with their
// open endpoints, and everything a posted operation may point at. Reachable from a global that
// is never destroyed, so neither the destructor nor process exit calls fi_close on them.
struct LeftOpen {
  ProviderChoice choice;
  std::vector<std::unique_ptr<Rail>> rails;
  std::vector<std::unique_ptr<MrCache>> caches;
  std::list<std::unique_ptr<Message>> messages;
  ControlSlots slots;
  std::vector<std::pair<size_t, std::unique_ptr<char[]>>> staging;
  std::vector<std::unique_ptr<FragmentContext>> notices;
};
std::mutex leftOpenMutex;
std::vector<std::unique_ptr<LeftOpen>>& leftOpen() {
  static auto* all = new std::vector<std::unique_ptr<LeftOpen>>;
  return *all;
}

// ofi_rxm (tcp;ofi_rxm, verbs;ofi_rxm) in libfabric 1.17: fi_close of an endpoint whose peer
// reset a connection while transfers were queued reads a cancelled completion with no context
// and crashes (tests/fault_matrix_test.cpp's tcp cells, about 1 run in 8 under load).
bool closeMayCrashAfterFailure(const fi_info* info) {
  return std::strstr(info->fabric_attr->prov_name, "ofi_rxm") != nullptr;
}

}  // namespace

size_t defaultRendezvousBytes(const std::string& providerName) {
  const bool ownTcpEndpoints = providerName == "net" || providerName == "tcp";
  return ownTcpEndpoints ? 0 : size_t{1} << 20;
}

Result<EfaOptions> EfaOptions::fromEnvironment() {
  EfaOptions options;
  options.provider = env::getString(env::kFiProvider);
  auto rails = env::getInt(env::kEfaRails);
  TRNCCL_RETURN_IF_ERROR(rails.status());
  if (rails.value() < 0 || rails.value() > 32)
    return makeError(Code::kInvalidArgument, "TRNCCL_EFA_RAILS=%lld is outside 0..32",
                     static_cast<long long>(rails.value()));
  options.rails = static_cast<int>(rails.value());
  if (env::getString(env::kEfaRendezvousBytes) != "auto") {
    auto rendezvous = env::getInt(env::kEfaRendezvousBytes);
    TRNCCL_RETURN_IF_ERROR(rendezvous.status());
    if (rendezvous.value() < 0)
      return makeError(Code::kInvalidArgument,
                       "TRNCCL_EFA_RNDV_BYTES=%lld is negative (0 turns rendezvous off, auto "
                       "leaves it to the provider)",
                       static_cast<long long>(rendezvous.value()));
    options.rendezvousBytes = static_cast<size_t>(rendezvous.value());
  }
  options.topologyXml = env::getString(env::kTopoXml);
  const std::string mrCache = env::getString(env::kEfaMrCache);
  if (mrCache == "auto" || mrCache.empty())
    options.userMrCache = UserMrCache::kAuto;
  else if (mrCache == "1" || mrCache == "on")
    options.userMrCache = UserMrCache::kOn;
  else if (mrCache == "0" || mrCache == "off")
    options.userMrCache = UserMrCache::kOff;
  else
    return makeError(Code::kInvalidArgument, "TRNCCL_EFA_MR_CACHE='%s' is not auto, 1 or 0 (%s)",
                     mrCache.c_str(), env::kEfaMrCache.doc);
  return options;
}

Result<std::unique_ptr<EfaTransport>> EfaTransport::open(int myRank, int nranks,
                                                         const EfaOptions& options) {
  if (nranks > (1 << 19))
    return makeError(Code::kInvalidArgument,
                     "the efa transport tags messages with 19 bits of rank: %d ranks is too many",
                     nranks);
  std::unique_ptr<EfaTransport> t(new EfaTransport(myRank, nranks));
  auto choice = chooseProvider(options.provider, options.rails, options.topologyXml);
  TRNCCL_RETURN_IF_ERROR(choice.status());
  t->choice_ = std::move(choice.value());
  for (fi_info* info : t->choice_.use) {
    auto rail = openRail(info, options.waitObject);
    TRNCCL_RETURN_IF_ERROR(rail.status());
    if (options.maxQueued) {
      rail.value()->maxSends = std::min(rail.value()->maxSends, options.maxQueued);
      rail.value()->maxRecvs = std::min(rail.value()->maxRecvs, options.maxQueued);
    }
    t->rails_.push_back(std::move(rail.value()));
    t->caches_.push_back(std::make_unique<MrCache>(*t->rails_.back(), kMrCacheEntries));
  }
  // Announcements carry 8-byte keys; providers with longer (raw) keys stay eager.
  const fi_info* info = t->rails_.front()->info;
  const size_t wanted =
      options.rendezvousBytes.value_or(defaultRendezvousBytes(info->fabric_attr->prov_name));
  t->rendezvousSource_ = options.rendezvousBytes ? "TRNCCL_EFA_RNDV_BYTES" : "provider default";
  if (!t->choice_.rma)
    t->rendezvousSource_ = "no FI_RMA";
  else if (info->domain_attr->mr_key_size > 8)
    t->rendezvousSource_ = "keys over 8 bytes";
  else
    t->rendezvousBytes_ = wanted;
  // Registration pins pages where the provider demands local or allocated memory; a cached
  // entry could then outlive its buffer (mr_cache.hpp).
  const bool pins = info->domain_attr->mr_mode & (FI_MR_LOCAL | FI_MR_ALLOCATED);
  t->cacheUserBuffers_ = options.userMrCache == EfaOptions::UserMrCache::kOn ||
                         (options.userMrCache == EfaOptions::UserMrCache::kAuto && !pins);
  for (const auto& rail : t->rails_) t->waitFds_.push_back(rail->waitFd);
  if (std::count(t->waitFds_.begin(), t->waitFds_.end(), -1) > 0) t->waitFds_.clear();
  t->sendsInFlight_.assign(t->rails_.size(), 0);
  t->recvsInFlight_.assign(t->rails_.size(), 0);
  t->fragmentsPerRail_.assign(t->rails_.size(), 0);
  t->addrOf_.assign(t->rails_.size(), std::vector<fi_addr_t>(nranks, FI_ADDR_NOTAVAIL));
  t->pairRails_.assign(nranks, 0);
  t->pairRendezvous_.assign(nranks, 0);
  t->sendSeq_.assign(nranks, 0);
  t->recvSeq_.assign(nranks, 0);
  t->nextSendToPost_.assign(nranks, 0);
  t->nextRecvToPost_.assign(nranks, 0);
  return t;
}

EfaTransport::EfaTransport(int myRank, int nranks) : myRank_(myRank), nranks_(nranks) {}

EfaTransport::~EfaTransport() {
  if (keepEndpointsOpen_) {
    auto kept = std::make_unique<LeftOpen>();
    kept->choice = std::move(choice_);
    kept->rails = std::move(rails_);
    kept->caches = std::move(caches_);
    kept->messages = std::move(messages_);
    kept->slots = std::move(slots_);
    kept->staging = std::move(staging_);
    kept->notices = std::move(notices_);
    std::lock_guard<std::mutex> lock(leftOpenMutex);
    leftOpen().push_back(std::move(kept));
    if (leftOpen().size() == 1)
      TRNCCL_WARN(log::kNet,
                  "efa: the endpoints of a communicator that failed over %s stay open until "
                  "this process exits (closing them after a peer reset crashes inside "
                  "libfabric's ofi_rxm); each failed communicator keeps its sockets and buffers",
                  leftOpen().back()->rails.front()->info->fabric_attr->prov_name);
    return;
  }
  // Endpoints first (cancelling what is still posted), then the registrations and staging
  // buffers those operations pointed at, then the rest of each rail; the control slots'
  // memory goes last, after its registration.
  for (auto& rail : rails_) rail->ep.reset();
  for (auto& m : messages_)
    for (auto& fc : m->contexts) delete[] fc->staging;
  messages_.clear();
  caches_.clear();
  rails_.clear();
}

// Layout: provider name (length-prefixed), rail count, each rail's address (length-prefixed),
// then this rank's rendezvous threshold (8 bytes; 0 = eager only).
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
  const uint64_t threshold = rendezvousBytes_;
  blob.append(reinterpret_cast<const char*>(&threshold), 8);
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
    uint64_t theirThreshold = 0;
    if (addresses.size() != theirRails || theirRails == 0 || at + 8 != blob.size())
      return makeError(Code::kRemoteError, "rank %d published a malformed efa address", peer);
    std::memcpy(&theirThreshold, blob.data() + at, 8);
    pairRails_[peer] = static_cast<int>(std::min(rails_.size(), theirRails));
    // Both sides of a pair must pick the same protocol for a message: the same rule on the
    // same two numbers gives the same answer on each side.
    pairRendezvous_[peer] =
        rendezvousBytes_ && theirThreshold ? std::max<size_t>(rendezvousBytes_, theirThreshold) : 0;
    for (int r = 0; r < pairRails_[peer]; ++r) perRail[r][peer] = addresses[r];
  }
  for (size_t r = 0; r < rails_.size(); ++r) {
    auto inserted = insertAddresses(*rails_[r], perRail[r]);
    TRNCCL_RETURN_IF_ERROR(inserted.status());
    addrOf_[r] = std::move(inserted.value());
  }
  return postNoticeReceive();
}

std::string EfaTransport::describe() const {
  const fi_info* info = rails_.front()->info;
  std::string domains;
  for (const auto& rail : rails_) {
    if (!domains.empty()) domains += ',';
    domains += rail->info->domain_attr->name;
  }
  std::string rma = "no FI_RMA (eager only)";
  if (rendezvousBytes_)
    rma = strformat("FI_RMA: rendezvous reads from %zu B (%s)", rendezvousBytes_,
                    rendezvousSource_.c_str());
  else if (choice_.rma)
    rma = strformat("FI_RMA offered, rendezvous off (%s)", rendezvousSource_.c_str());
  std::string rxm;  // which receive depth ofi_rxm runs with, and whose choice it is
  if (std::strstr(info->fabric_attr->prov_name, "ofi_rxm")) {
    const char* depth = std::getenv("FI_OFI_RXM_MSG_RX_SIZE");
    rxm = strformat(", FI_OFI_RXM_MSG_RX_SIZE=%s (%s)", depth ? depth : "?",
                    applyProviderDefaults().empty() ? "the user's" : "trnccl's default");
  }
  return strformat(
      "provider %s, fabric %s, %zu rail(s) on domain(s) %s (%s), MR mode %s (user buffers: %s), "
      "%s, inject %zu B, %zu outstanding sends and %zu receives per rail, size check %s%s%s",
      info->fabric_attr->prov_name, info->fabric_attr->name, rails_.size(), domains.c_str(),
      choice_.railReason.c_str(), mrModeText(info->domain_attr->mr_mode).c_str(),
      cacheUserBuffers_ ? "registrations cached" : "registered per message", rma.c_str(),
      rails_.front()->injectBytes, rails_.front()->maxSends, rails_.front()->maxRecvs,
      rails_.front()->cqDataBytes >= 4 ? "in remote CQ data" : "by length only", rxm.c_str(),
      canSleep() ? ", blocked waits sleep on the wait descriptors (TRNCCL_EFA_SLEEP=1)" : "");
}

void EfaTransport::shutdown() {
  for (auto& rail : rails_) rail->ep.reset();
  shutDown_ = true;
}

void EfaTransport::fail(int originRank, const std::string& sentence) {
  if (shutDown_) return;
  sendNotices(originRank, sentence);
  shutDown_ = true;
  if (closeMayCrashAfterFailure(rails_.front()->info)) {
    keepEndpointsOpen_ = true;  // and never polled again: see the header
    return;
  }
  for (auto& rail : rails_) rail->ep.reset();
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
  // Injected messages have no completion to wait for; a few more passes let a provider that
  // queued one (socket full) push it out before the endpoint closes.
  for (int pass = 0; pass < 16; ++pass)
    if (!pollCompletions().isOk()) return;
}

size_t EfaTransport::registrations() const {
  size_t n = 0;
  for (const auto& c : caches_) n += c->registrations();
  return n;
}

size_t EfaTransport::transientRegistrations() const {
  size_t n = 0;
  for (const auto& c : caches_) n += c->transientInUse();
  return n;
}

Result<UserRegistration> EfaTransport::registerUserBuffer(const void* addr, size_t bytes) {
  UserRegistration registration;
  for (auto& cache : caches_) {
    auto entry = cache->registerUser(addr, bytes);
    if (!entry.isOk()) {
      for (size_t r = 0; r < registration.perRail.size(); ++r)
        (void)caches_[r]->deregisterUser(registration.perRail[r]);  // not in use yet
      return entry.status();
    }
    registration.perRail.push_back(entry.value());
  }
  return registration;
}

Status EfaTransport::deregisterUserBuffer(const UserRegistration& registration) {
  if (registration.perRail.size() != caches_.size())
    return makeError(Code::kInvalidArgument, "a registration made with another transport");
  // All or nothing: one released already, or still in use on any rail, stays on every rail.
  for (size_t r = 0; r < caches_.size(); ++r)
    TRNCCL_RETURN_IF_ERROR(caches_[r]->releasable(registration.perRail[r]));
  for (size_t r = 0; r < caches_.size(); ++r)
    TRNCCL_RETURN_IF_ERROR(caches_[r]->deregisterUser(registration.perRail[r]));
  return Status::ok();
}

size_t EfaTransport::userRegistrations() const {
  return caches_.empty() ? 0 : caches_.front()->userRegistered();
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

Status EfaTransport::sizeMismatch(const Message& m) const {
  return makeError(Code::kInvalidUsage,
                   "rank %d sent a message of a different size than the %zu bytes rank %d "
                   "expected (mismatched count or datatype between the two calls)",
                   m.peer, m.bytes, myRank_);
}

// One of a message's operations left the provider, with or without an error.
void EfaTransport::bookFinished(const FragmentContext& fc) {
  Message& m = *fc.message;
  --(fc.tx ? sendsInFlight_ : recvsInFlight_)[fc.rail];
  ++(isControl(fc.kind) ? m.ctrlCompleted : m.completed);
}

// The sender's announcement arrived in the receiver's control slot: check it describes the
// message this rank expects, and keep where to read from.
void EfaTransport::bookAnnouncement(Message& m, const fi_cq_tagged_entry& entry) {
  AnnounceHeader header;
  const char* slot = slots_.at(m.slot);
  std::memcpy(&header, slot, sizeof(header));
  const size_t railBytes = entry.len >= sizeof(header) ? entry.len - sizeof(header) : 0;
  const bool wellFormed = entry.len >= sizeof(header) && header.version == 1 && header.rails >= 1 &&
                          railBytes == header.rails * sizeof(RemoteBuffer);
  if (!wellFormed || header.bytes != m.bytes) {
    if (m.error.isOk()) m.error = sizeMismatch(m);
    return;
  }
  m.remote.resize(header.rails);
  std::memcpy(m.remote.data(), slot + sizeof(header), railBytes);
  m.announced = true;
}

void EfaTransport::bookCompletion(FragmentContext& fc, const fi_cq_tagged_entry& entry) {
  Message& m = *fc.message;
  bookFinished(fc);
  const bool incoming = !fc.tx && (fc.kind == OpKind::kData || fc.kind == OpKind::kAnnounce);
  if (incoming) {
    // Every fragment and announcement carries its message's size (remote CQ data), so a
    // sender that sent a different size is caught even when the fragment itself fits exactly.
    const Rail& rail = *rails_[fc.rail];
    const bool sizeKnown = rail.cqDataBytes >= 4;
    const bool sizeDiffers =
        sizeKnown && (!(entry.flags & FI_REMOTE_CQ_DATA) || entry.data != sizeTag(m.bytes, rail));
    const bool lengthDiffers = fc.kind == OpKind::kData && entry.len != fc.bytes;
    if ((sizeDiffers || lengthDiffers) && m.error.isOk()) m.error = sizeMismatch(m);
    if (fc.kind == OpKind::kAnnounce && m.error.isOk()) bookAnnouncement(m, entry);
  }
  if (m.reduces() && (fc.kind == OpKind::kData || fc.kind == OpKind::kRead))
    m.arrived.push_back(&fc);
}

void EfaTransport::releaseResources(Message& m) {
  for (size_t r = 0; r < m.mr.size(); ++r) caches_[r]->release(m.mr[r]);
  m.mr.clear();
  for (auto& fc : m.contexts)
    if (fc->staging) {
      caches_[fc->rail]->release(fc->stagingMr);
      returnStaging(fc->staging, fc->bytes);
      fc->staging = nullptr;
    }
  if (m.slot >= 0) slots_.give(m.slot);
  m.slot = -1;
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
        if (fc && fc->kind == OpKind::kNotice) {
          bookNotice(*fc, nullptr);
          continue;
        }
        char detail[256] = {};
        const char* text = fi_cq_strerror(cq, err.prov_errno, err.err_data, detail, sizeof(detail));
        if (!fc) return makeError(Code::kSystemError, "libfabric completion error: %s", text);
        Message& m = *fc->message;
        bookFinished(*fc);
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
        if (fc->kind == OpKind::kNotice)
          bookNotice(*fc, &entries[i]);
        else
          bookCompletion(*fc, entries[i]);
      }
      completionsSeen_ += static_cast<uint64_t>(n);
      // A short batch means the queue was empty: reading again to hear FI_EAGAIN would cost
      // one more progress call (a poll() system call with tcp) for every completion.
      if (n < 16) break;
    }
  }
  // Messages whose operation failed are freed once the provider has let go of them.
  messages_.remove_if([&](const std::unique_ptr<Message>& m) {
    if (!m->orphaned || !m->providerDone()) return false;
    releaseResources(*m);
    return true;
  });
  return Status::ok();
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
    } else if (m.reducesInDestination && fc->bytes) {
      char* landed = static_cast<char*>(op.dst) + fc->offset;
      applyRecvAction(op, fc->offset, landed, fc->bytes);  // dst = op(fragment, local), in place
    }
    ++m.applied;
  }
  m.arrived.clear();
  // A rendezvous sender moves no fragments itself: the receiver reads them.
  const uint32_t dataOps = m.rendezvous && m.send ? 0 : m.fragments;
  if (m.completed < dataOps || (m.reduces() && m.applied < m.fragments)) return false;
  if (m.rendezvous && m.ctrlCompleted < 2) return false;  // announce + done, both ways
  if (m.rendezvous && !m.send) ++rendezvousReceives_;
  releaseResources(m);
  op.done = op.bytes;
  op.transportState = nullptr;
  messages_.remove_if([&](const std::unique_ptr<Message>& owned) { return owned.get() == &m; });
  return true;
}

// Posting comes before polling: a small send then completes (injected) without touching the
// completion queue, and a new receive is posted before anything waits for it. Under the
// progress engine the queues are read once at the end of each pass (endPass), after every
// step of the pass has posted what it could: with the tcp provider every read is a poll()
// system call, and one per pending step per pass was the bulk of the small-message cost.
Result<bool> EfaTransport::progressSend(TransferOp& op) {
  if (shutDown_)
    return makeError(Code::kInvalidUsage, "the efa transport was shut down after an error");
  Message* m = static_cast<Message*>(op.transportState);
  if (!m) {
    auto started = start(op, /*send=*/true);
    TRNCCL_RETURN_IF_ERROR(started.status());
    m = started.value();
  }
  auto posted = post(*m, op);
  if (!posted.isOk()) {
    drop(m, op);
    return posted.status();
  }
  auto result = finish(*m, op);
  if (!result.isOk() || result.value()) return result;
  TRNCCL_RETURN_IF_ERROR(pollUnlessEngineDoes());
  return finish(*m, op);
}

Result<bool> EfaTransport::progressRecv(TransferOp& op) {
  if (shutDown_)
    return makeError(Code::kInvalidUsage, "the efa transport was shut down after an error");
  Message* m = static_cast<Message*>(op.transportState);
  if (!m) {
    auto started = start(op, /*send=*/false);
    TRNCCL_RETURN_IF_ERROR(started.status());
    m = started.value();
  }
  // Fold in staged fragments that arrived on earlier passes first: frees room to post more.
  auto result = finish(*m, op);
  if (!result.isOk() || result.value()) return result;
  auto posted = post(*m, op);
  if (!posted.isOk()) {
    drop(m, op);
    return posted.status();
  }
  TRNCCL_RETURN_IF_ERROR(pollUnlessEngineDoes());
  return finish(*m, op);
}

Status EfaTransport::pollUnlessEngineDoes() {
  stepsThisPass_ = true;
  return endOfPassPolling_ ? Status::ok() : pollCompletions();
}

Status EfaTransport::endPass() {
  endOfPassPolling_ = true;
  // A pass that waited on shm steps only leaves the queues to progressIdle's slower beat.
  if (shutDown_ || !stepsThisPass_) return Status::ok();
  stepsThisPass_ = false;
  // The pass is waiting anyway: read a few times until something completes. Providers that
  // progress inside the read (shm's handshakes need both sides to turn) then move several
  // steps per pass, and nothing is posted late because of it.
  const uint64_t before = completionsSeen_;
  for (int read = 0; read < readsPerPass_; ++read) {
    TRNCCL_RETURN_IF_ERROR(pollCompletions());
    if (completionsSeen_ != before) break;
  }
  return Status::ok();
}

}  // namespace trnccl::efa
