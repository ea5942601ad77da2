#include "api/validate.hpp"

#include <limits>

#include "core/dtype.hpp"

namespace trnccl::api {
namespace {

constexpr size_t kMaxBytes = std::numeric_limits<size_t>::max() / 2;

// count * size * multiplier must fit: a negative count cast to size_t lands here too.
Status checkBytes(const char* what, size_t count, size_t esize, size_t multiplier) {
  size_t bytes = 0;
  // A multiplication, not a division: this check is on every call's path.
  if (!__builtin_mul_overflow(count, esize * multiplier, &bytes) && bytes <= kMaxBytes)
    return Status::ok();
  return makeError(Code::kInvalidArgument,
                   "%s=%zu elements of %zu bytes%s overflows the address space (a negative "
                   "count converted to size_t?)",
                   what, count, esize, multiplier > 1 ? " times nranks" : "");
}

bool reduces(CollKind kind) {
  return kind == CollKind::kAllReduce || kind == CollKind::kReduce ||
         kind == CollKind::kReduceScatter;
}

}  // namespace

Status validateCall(const char* fn, int rank, int nranks, const CollArgs& a) {
  auto fail = [&](Status s) {
    return s.isOk() ? s : s.withContext(strformat("rank %d %s: ", rank, fn));
  };
  if (a.kind == CollKind::kBarrier) return Status::ok();
  if (!isValidDtype(a.dtype))
    return fail(makeError(Code::kInvalidArgument, "datatype %d is not a trncclDataType_t",
                          static_cast<int>(a.dtype)));
  size_t esize = dtypeSize(a.dtype);
  if (reduces(a.kind)) {
    if (!isValidRedOp(a.op))
      return fail(makeError(Code::kInvalidArgument, "op %d is not a trncclRedOp_t",
                            static_cast<int>(a.op)));
    if (!isReducible(a.dtype))
      return fail(makeError(Code::kInvalidArgument,
                            "%s is a payload-only type and cannot be "
                            "reduced; use a float type for reductions",
                            dtypeName(a.dtype)));
  }
  if ((a.kind == CollKind::kBroadcast || a.kind == CollKind::kReduce) &&
      (a.root < 0 || a.root >= nranks))
    return fail(
        makeError(Code::kInvalidArgument, "root %d is out of range [0, %d)", a.root, nranks));
  if (a.kind == CollKind::kSendRecv && (a.peer < 0 || a.peer >= nranks))
    return fail(
        makeError(Code::kInvalidArgument, "peer %d is out of range [0, %d)", a.peer, nranks));

  size_t sendCount = a.count, recvCount = a.count;
  const char* countName = "count";
  switch (a.kind) {
    case CollKind::kAllGather:
      recvCount = a.count * nranks;
      countName = "sendcount";
      break;
    case CollKind::kReduceScatter:
      sendCount = a.count * nranks;
      countName = "recvcount";
      break;
    case CollKind::kAllToAll: sendCount = recvCount = a.count * nranks; break;
    default: break;
  }
  bool scaled = a.kind == CollKind::kAllGather || a.kind == CollKind::kReduceScatter ||
                a.kind == CollKind::kAllToAll;
  TRNCCL_RETURN_IF_ERROR(fail(checkBytes(countName, a.count, esize, scaled ? nranks : 1)));

  if (a.kind == CollKind::kAllToAllv) {
    if (a.sendcounts.empty() || a.sdispls.empty() || a.recvcounts.empty() || a.rdispls.empty())
      return fail(makeError(Code::kInvalidArgument,
                            "sendcounts, sdispls, recvcounts and rdispls must not be NULL"));
    sendCount = recvCount = 0;
    for (int q = 0; q < nranks; ++q) {
      TRNCCL_RETURN_IF_ERROR(fail(checkBytes("sendcounts[q]", a.sendcounts[q], esize, 1)));
      TRNCCL_RETURN_IF_ERROR(fail(checkBytes("recvcounts[q]", a.recvcounts[q], esize, 1)));
      TRNCCL_RETURN_IF_ERROR(fail(checkBytes("sdispls[q]", a.sdispls[q], esize, 1)));
      TRNCCL_RETURN_IF_ERROR(fail(checkBytes("rdispls[q]", a.rdispls[q], esize, 1)));
      sendCount += a.sendcounts[q];
      recvCount += a.recvcounts[q];
    }
    if (sendCount && recvCount && a.sendbuff == a.recvbuff)
      return fail(makeError(Code::kInvalidArgument,
                            "in-place all-to-all-v (sendbuff == recvbuff) is not supported; "
                            "use separate buffers"));
  }

  bool sends = a.kind != CollKind::kSendRecv || a.isSend;
  bool receives = a.kind != CollKind::kSendRecv || !a.isSend;
  bool rootOnlyRecv = a.kind == CollKind::kReduce && rank != a.root;
  bool rootOnlySend = a.kind == CollKind::kBroadcast && rank != a.root;
  if (sends && !rootOnlySend && sendCount > 0 && !a.sendbuff)
    return fail(
        makeError(Code::kInvalidArgument, "sendbuff is NULL but %s=%zu", countName, a.count));
  if (receives && !rootOnlyRecv && recvCount > 0 && !a.recvbuff)
    return fail(
        makeError(Code::kInvalidArgument, "recvbuff is NULL but %s=%zu", countName, a.count));
  return Status::ok();
}

}  // namespace trnccl::api
