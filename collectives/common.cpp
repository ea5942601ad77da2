// Helpers shared by every algorithm.
#include <algorithm>

#include "collectives/algorithm.hpp"
#include "core/dtype.hpp"
#include "transports/shm/cma.hpp"

namespace trnccl {

size_t elementSize(const CollArgs& a) {
  return dtypeSize(a.dtype);
}

shm::OpDescriptor describe(const CollArgs& a) {
  shm::OpDescriptor d{};
  d.kind = static_cast<int32_t>(a.kind);
  bool reduces = a.kind == CollKind::kAllReduce || a.kind == CollKind::kReduce ||
                 a.kind == CollKind::kReduceScatter;
  d.dtype = a.kind == CollKind::kBarrier ? -1 : static_cast<int32_t>(a.dtype);
  d.op = reduces ? static_cast<int32_t>(a.op) : -1;
  d.root = (a.kind == CollKind::kBroadcast || a.kind == CollKind::kReduce) ? a.root : -1;
  d.count = a.kind == CollKind::kAllToAllv ? 0 : a.count;
  return d;
}

CmaBand cmaBand(uint64_t minBytes, uint64_t maxBytes, uint64_t kernelCopyPermille) {
  CmaBand band;
  band.minBytes = minBytes;
  band.maxBytes = maxBytes;
  band.broadcastMaxBytes = shm::broadcastCmaMaxBytes(maxBytes, kernelCopyPermille);
  return band;
}

}  // namespace trnccl
