#include "collectives/shared_buffers.hpp"

namespace trnccl {
namespace {

bool covers(const shm::SharedRegion& region, size_t bytes) {
  return region.id != 0 && region.offset <= region.bytes && bytes <= region.bytes - region.offset;
}

bool qualifies(const shm::OpDescriptor& d, const SharedNeed& need) {
  return (need.sendBytes == 0 || covers(d.sendRegion, need.sendBytes)) &&
         (need.recvBytes == 0 || covers(d.recvRegion, need.recvBytes));
}

}  // namespace

shm::OpDescriptor describeBuffers(const CollArgs& a) {
  shm::OpDescriptor d = describe(a);
  d.sendAddress = reinterpret_cast<uint64_t>(a.sendbuff);
  d.recvAddress = reinterpret_cast<uint64_t>(a.recvbuff);
  shm::findSharedRegion(a.sendbuff, &d.sendRegion);
  shm::findSharedRegion(a.recvbuff, &d.recvRegion);
  return d;
}

bool ownBuffersShared(const CollArgs& a, const CommView& c, const SharedNeed& need) {
  if (!c.mapsPeerMemory()) return false;
  shm::OpDescriptor d{};
  shm::findSharedRegion(a.sendbuff, &d.sendRegion);
  shm::findSharedRegion(a.recvbuff, &d.recvRegion);
  return qualifies(d, need);
}

bool everyRankShares(const CommView& c, uint64_t seq, const SharedNeed& need) {
  for (int q = 0; q < c.nranks; ++q)
    if ((need.onlyRank < 0 || q == need.onlyRank) &&
        !qualifies(c.segment->rankArea(q)->descriptors[seq % shm::kDescriptorSlots], need))
      return false;
  return true;
}

void reduceFromPeers(ScheduleBuilder& later, const CollArgs& a, const CommView& c, void* dst,
                     const void* own, size_t offset, size_t count) {
  const size_t bytes = count * elementSize(a);
  std::vector<const void*> sources(c.nranks);
  char* staged = nullptr;  // peers this process could not map, read by CMA first
  for (int q = 0; q < c.nranks; ++q) {
    if (q == c.rank) {
      sources[q] = own;
      continue;
    }
    ScheduleBuilder::PeerSendBuffer theirs = later.peerSendBuffer(q);
    if (theirs.mapped && offset <= theirs.bytes && bytes <= theirs.bytes - offset) {
      sources[q] = theirs.mapped + offset;
      later.countPeerRead(q, bytes);
      continue;
    }
    if (!staged) staged = later.scratch(static_cast<size_t>(c.nranks) * bytes);
    later.cmaRead(staged + q * bytes, q, offset, bytes);
    sources[q] = staged + q * bytes;
  }
  later.reduce(
      dst, c.nranks, [&](int q) { return sources[q]; }, count, a.op == trncclAvg ? c.nranks : 0);
}

}  // namespace trnccl
