// trncclCommGetPeerTraffic: per-peer message counters, for tests and link statistics.
#include "api/handles.hpp"

using trnccl::Code;
using trnccl::makeError;
using trnccl::api::report;

static_assert(static_cast<int>(trnccl::topology::LinkClass::kSelf) == trncclTransportSelf &&
              static_cast<int>(trnccl::topology::LinkClass::kNeuronLink) ==
                  trncclTransportNeuronLink &&
              static_cast<int>(trnccl::topology::LinkClass::kShm) == trncclTransportShm &&
              static_cast<int>(trnccl::topology::LinkClass::kEfa) == trncclTransportEfa);

extern "C" {

trncclResult_t trncclCommGetPeerTraffic(trncclComm_t comm, trncclPeerTraffic_t* entries,
                                        int capacity, int* count) {
  if (!comm || !count || capacity < 0 || (capacity > 0 && !entries))
    return report(comm, makeError(Code::kInvalidArgument,
                                  "trncclCommGetPeerTraffic: comm or count is NULL, or entries "
                                  "is NULL with capacity %d",
                                  capacity));
  trnccl::api::CallGuard guard(comm);
  const auto traffic = comm->impl->traffic();
  *count = static_cast<int>(traffic.size());
  for (int i = 0; i < capacity && i < *count; ++i) {
    const auto& t = traffic[i];
    entries[i] = {t.peer,
                  static_cast<trncclTransport_t>(t.via),
                  t.myChip,
                  t.peerChip,
                  t.counts.sentMessages,
                  t.counts.sentBytes,
                  t.counts.recvMessages,
                  t.counts.recvBytes};
  }
  return trncclSuccess;
}

}  // extern "C"
