// Failure notices over the network: when a communicator fails, each rank tells its efa peers
// which rank the failure started on and why, before its endpoints stop. Ranks of one node
// learn it through the segment's abort word; without this, a rank on another node learned
// only from a connection reset (no cause) or its own timeout (and over ofi_rxm, whose failed
// endpoints stay open, only from the timeout). Wire format, in one control slot: the origin
// rank (int32, little endian as the host) and its sentence, NUL-terminated.
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <chrono>
#include <cstring>

#include "core/log.hpp"
#include "core/strformat.hpp"
#include "transports/efa/efa_transport.hpp"

namespace trnccl::efa {

Status EfaTransport::postNoticeReceive() {
  auto slot = slots_.take(*caches_[0]);
  TRNCCL_RETURN_IF_ERROR(slot.status());
  noticeRecvSlot_ = slot.value();
  auto fc = std::make_unique<FragmentContext>();
  fc->kind = OpKind::kNotice;
  fc->tx = false;
  // Any sender: the sender's bits are ignored, the rest of the tag must match.
  ssize_t rc;
  do {
    rc = fi_trecv(rails_[0]->ep.get(), slots_.at(noticeRecvSlot_), ControlSlots::kSlotBytes,
                  slots_.descriptor(noticeRecvSlot_), FI_ADDR_UNSPEC, noticeTag(0), kSenderBits,
                  &fc->context);
  } while (rc == -FI_EAGAIN && pollCompletions().isOk());
  if (rc != 0)
    return makeError(Code::kSystemError, "efa: cannot post the failure-notice receive: %s",
                     fiError("fi_trecv", rc).c_str());
  notices_.push_back(std::move(fc));
  return Status::ok();
}

void EfaTransport::sendNotices(int originRank, const std::string& sentence) {
  if (noticeRecvSlot_ < 0) return;  // never connected: no peer to tell
  auto slot = slots_.take(*caches_[0]);
  if (!slot.isOk()) return;  // best effort: the peers still time out
  char* text = slots_.at(slot.value());
  const int32_t origin = originRank;
  std::memcpy(text, &origin, sizeof(origin));
  const size_t room = ControlSlots::kSlotBytes - sizeof(origin) - 1;
  const size_t length = std::min(sentence.size(), room);
  std::memcpy(text + sizeof(origin), sentence.data(), length);
  text[sizeof(origin) + length] = '\0';
  const size_t bytes = sizeof(origin) + length + 1;

  std::vector<int> pending;
  for (int peer = 0; peer < nranks_; ++peer)
    if (peer != myRank_ && peer != originRank && peer != noticeOrigin_ && pairRails_[peer] > 0)
      pending.push_back(peer);
  const size_t peers = pending.size();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(kNoticeSeconds);
  // Posting may answer FI_EAGAIN (a connection still being made, a full queue): retry each
  // peer between polls until all are posted or the time is up, then wait for the completions.
  while (!pending.empty() && std::chrono::steady_clock::now() < deadline) {
    std::vector<int> again;
    for (int peer : pending) {
      auto fc = std::make_unique<FragmentContext>();
      fc->kind = OpKind::kNotice;
      fc->tx = true;
      ssize_t rc = fi_tsend(rails_[0]->ep.get(), text, bytes, slots_.descriptor(slot.value()),
                            addrOf_[0][peer], noticeTag(myRank_), &fc->context);
      if (rc == 0) {
        ++noticesInFlight_;
        notices_.push_back(std::move(fc));
      } else if (rc == -FI_EAGAIN) {
        again.push_back(peer);
      }  // any other error: that peer is gone already
    }
    pending.swap(again);
    (void)pollCompletions();
  }
  while (noticesInFlight_ > 0 && std::chrono::steady_clock::now() < deadline)
    (void)pollCompletions();
  TRNCCL_INFO(log::kNet,
              "efa: failure notice (origin rank %d) posted to %zu of %zu peers, %zu unconfirmed "
              "after %.0f ms",
              originRank, peers - pending.size(), peers, noticesInFlight_, kNoticeSeconds * 1e3);
}

void EfaTransport::bookNotice(FragmentContext& fc, const fi_cq_tagged_entry* entry) {
  if (fc.tx) {
    if (noticesInFlight_ > 0) --noticesInFlight_;
    return;
  }
  if (!entry || noticeOrigin_ >= 0) return;  // cancelled at close, or not the first
  const char* text = slots_.at(noticeRecvSlot_);
  int32_t origin = -1;
  std::memcpy(&origin, text, sizeof(origin));
  const int sender = senderOfTag(entry->tag);
  noticeOrigin_ = origin >= 0 && origin < nranks_ ? origin : sender;
  const size_t room = ControlSlots::kSlotBytes - sizeof(origin);
  noticeSentence_.assign(text + sizeof(origin), strnlen(text + sizeof(origin), room));
  if (sender != noticeOrigin_) noticeSentence_ += strformat(" (passed on by rank %d)", sender);
}

Status EfaTransport::peerFailure() const {
  if (noticeOrigin_ < 0) return Status::ok();
  return makeError(Code::kRemoteError, "stopped because rank %d failed: %s", noticeOrigin_,
                   noticeSentence_.c_str());
}

}  // namespace trnccl::efa
