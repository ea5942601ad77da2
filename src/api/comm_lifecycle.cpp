// Unique ids, init, split, destroy, abort and communicator queries.
#include <algorithm>
#include <cstring>
#include <thread>

#include "api/handles.hpp"
#include "bootstrap/bootstrap.hpp"
#include "core/env.hpp"
#include "core/log.hpp"

using trnccl::Code;
using trnccl::CollArgs;
using trnccl::CollKind;
using trnccl::makeError;
using trnccl::Status;
using trnccl::api::report;

namespace {

Status optionsFromConfig(const trncclConfig_t* config, trnccl::CommOptions* options) {
  auto timeout = trnccl::env::getSeconds(trnccl::env::kTimeout);
  TRNCCL_RETURN_IF_ERROR(timeout.status());
  options->timeoutSeconds = timeout.value();
  if (!config) return Status::ok();
  if (config->size != sizeof(trncclConfig_t) || config->magic != TRNCCL_CONFIG_MAGIC)
    return makeError(Code::kInvalidArgument,
                     "config was not set up with "
                     "TRNCCL_CONFIG_INITIALIZER (size %zu, magic %#x)",
                     config->size, config->magic);
  if (config->version > TRNCCL_VERSION_CODE)
    return makeError(Code::kInvalidArgument,
                     "config version %u is newer than this library "
                     "(%d)",
                     config->version, TRNCCL_VERSION_CODE);
  if (config->blocking != 1)
    return makeError(Code::kInvalidArgument,
                     "config.blocking=%d: only blocking init (1) is "
                     "supported",
                     config->blocking);
  if (config->timeoutMs != TRNCCL_TIMEOUT_DEFAULT) {
    if (config->timeoutMs <= 0)
      return makeError(Code::kInvalidArgument,
                       "config.timeoutMs=%d must be positive or "
                       "TRNCCL_TIMEOUT_DEFAULT",
                       config->timeoutMs);
    options->timeoutSeconds = config->timeoutMs / 1000.0;
  }
  if (config->algorithm) options->algorithm = config->algorithm;
  if (config->commName) options->name = config->commName;
  return Status::ok();
}

trncclResult_t initComm(trncclComm_t* out, int nranks, const trncclUniqueId& id, int rank,
                        const trncclConfig_t* config, unsigned parentRanksOnMachine = 0) {
  if (!out)
    return report(nullptr,
                  makeError(Code::kInvalidArgument, "trncclCommInitRank: comm pointer is NULL"));
  *out = nullptr;
  if (nranks <= 0)
    return report(nullptr, makeError(Code::kInvalidArgument,
                                     "trncclCommInitRank: nranks=%d must be positive", nranks));
  if (rank < 0 || rank >= nranks)
    return report(nullptr,
                  makeError(Code::kInvalidArgument,
                            "trncclCommInitRank: rank %d is out of range [0, %d)", rank, nranks));
  trnccl::CommOptions options;
  Status status = optionsFromConfig(config, &options);
  options.parentRanksOnMachine = parentRanksOnMachine;
  if (!status.isOk())
    return report(nullptr,
                  status.withContext(trnccl::strformat("rank %d trncclCommInitRank: ", rank)));
  auto created = trnccl::Communicator::create(nranks, id, rank, options);
  if (!created.isOk())
    return report(nullptr, created.status().withContext(
                               trnccl::strformat("rank %d trncclCommInitRank: ", rank)));
  auto* comm = new trncclComm();
  comm->impl = std::move(created.value());
  *out = comm;
  return trncclSuccess;
}

// Runs one blocking collective on a communicator from inside the library (used by split).
Status runInternal(trnccl::Communicator& comm, const CollArgs& args) {
  auto op = comm.enqueue({args});
  TRNCCL_RETURN_IF_ERROR(op.status());
  return comm.wait(op.value(), -1);
}

}  // namespace

extern "C" {

trncclResult_t trncclGetVersion(int* version) {
  if (!version)
    return report(nullptr, makeError(Code::kInvalidArgument, "trncclGetVersion: version is NULL"));
  *version = TRNCCL_VERSION_CODE;
  return trncclSuccess;
}

trncclResult_t trncclGetUniqueId(trncclUniqueId* uniqueId) {
  if (!uniqueId)
    return report(nullptr,
                  makeError(Code::kInvalidArgument, "trncclGetUniqueId: uniqueId is NULL"));
  Status status = trnccl::bootstrap::createUniqueId(uniqueId);
  return report(nullptr, status.withContext("trncclGetUniqueId: "));
}

trncclResult_t trncclGetEnv(const char* name, const char** value, int* isSet) {
  if (!name || !value)
    return report(nullptr,
                  makeError(Code::kInvalidArgument, "trncclGetEnv: name or value is NULL"));
  const trnccl::env::Var* var = trnccl::env::find(name);
  if (!var)
    return report(nullptr, makeError(Code::kInvalidArgument,
                                     "trncclGetEnv: '%s' is not a trnccl variable (trnccl-info "
                                     "--env lists every one)",
                                     name));
  const char* set = trnccl::env::rawValue(*var);
  *value = set ? set : var->defaultValue;
  if (isSet) *isSet = set != nullptr;
  return trncclSuccess;
}

trncclResult_t trncclGetLaunchInfo(int* rank, int* nranks, trncclUniqueId* uniqueId) {
  if (!rank || !nranks || !uniqueId)
    return report(nullptr, makeError(Code::kInvalidArgument,
                                     "trncclGetLaunchInfo: rank, nranks or uniqueId is NULL"));
  namespace env = trnccl::env;
  for (const env::Var* var : {&env::kRank, &env::kNranks, &env::kUniqueId})
    if (!env::isSet(*var))
      return report(nullptr, makeError(Code::kInvalidUsage,
                                       "trncclGetLaunchInfo: %s is not set; start the program "
                                       "with trnccl-run -np N (or set TRNCCL_RANK, "
                                       "TRNCCL_NRANKS and TRNCCL_UNIQUE_ID)",
                                       var->name));
  auto r = env::getInt(env::kRank);
  auto n = env::getInt(env::kNranks);
  auto id = trnccl::bootstrap::uniqueIdFromHex(env::getString(env::kUniqueId));
  Status problem = !r.isOk() ? r.status() : !n.isOk() ? n.status() : id.status();
  if (problem.isOk() && (n.value() <= 0 || r.value() < 0 || r.value() >= n.value()))
    problem = makeError(Code::kInvalidUsage, "TRNCCL_RANK=%lld is not in [0, TRNCCL_NRANKS=%lld)",
                        static_cast<long long>(r.value()), static_cast<long long>(n.value()));
  if (!problem.isOk())
    return report(
        nullptr,
        Status(Code::kInvalidUsage, problem.message()).withContext("trncclGetLaunchInfo: "));
  *rank = static_cast<int>(r.value());
  *nranks = static_cast<int>(n.value());
  *uniqueId = id.value();
  return trncclSuccess;
}

trncclResult_t trncclCommInitRank(trncclComm_t* comm, int nranks, trncclUniqueId commId, int rank) {
  return initComm(comm, nranks, commId, rank, nullptr);
}

trncclResult_t trncclCommInitRankConfig(trncclComm_t* comm, int nranks, trncclUniqueId commId,
                                        int rank, const trncclConfig_t* config) {
  return initComm(comm, nranks, commId, rank, config);
}

trncclResult_t trncclCommSplit(trncclComm_t comm, int color, int key, trncclComm_t* newcomm,
                               const trncclConfig_t* config) {
  if (!comm)
    return report(nullptr, makeError(Code::kInvalidArgument, "trncclCommSplit: comm is NULL"));
  trnccl::api::CallGuard guard(comm);
  trnccl::Communicator& parent = *comm->impl;
  const int rank = parent.rank(), n = parent.nranks();
  auto fail = [&](const Status& s) {
    return report(comm, s.withContext(trnccl::strformat("rank %d trncclCommSplit: ", rank)));
  };
  if (!newcomm) return fail(makeError(Code::kInvalidArgument, "newcomm is NULL"));
  *newcomm = nullptr;
  if (color < TRNCCL_SPLIT_NOCOLOR)
    return fail(makeError(Code::kInvalidArgument,
                          "color %d is negative (only "
                          "TRNCCL_SPLIT_NOCOLOR=-1 is allowed)",
                          color));
  // 1. Everyone learns everyone's (color, key).
  std::vector<int32_t> mine = {color, key};
  std::vector<int32_t> all(2 * n);
  CollArgs gather;
  gather.kind = CollKind::kAllGather;
  gather.sendbuff = mine.data();
  gather.recvbuff = all.data();
  gather.count = 2;
  gather.dtype = trncclInt32;
  Status status = runInternal(parent, gather);
  if (!status.isOk()) return fail(status);
  std::vector<int> members;
  for (int r = 0; r < n; ++r)
    if (all[2 * r] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  // 2. The first member of each colour creates the new rendezvous; everyone gathers the ids.
  trncclUniqueId myId{};
  bool leader = color != TRNCCL_SPLIT_NOCOLOR && members.front() == rank;
  if (leader) {
    status = trnccl::bootstrap::createUniqueId(&myId);
    if (!status.isOk()) return fail(status);
  }
  std::vector<trncclUniqueId> ids(n);
  gather.sendbuff = &myId;
  gather.recvbuff = ids.data();
  gather.count = sizeof(trncclUniqueId);
  gather.dtype = trncclUint8;
  status = runInternal(parent, gather);
  if (!status.isOk()) return fail(status);
  if (color == TRNCCL_SPLIT_NOCOLOR) return trncclSuccess;
  int newRank = static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
  trncclConfig_t inherited = TRNCCL_CONFIG_INITIALIZER;
  inherited.timeoutMs = static_cast<int>(parent.timeoutSeconds() * 1000);
  if (!parent.options().algorithm.empty()) inherited.algorithm = parent.options().algorithm.c_str();
  return initComm(newcomm, static_cast<int>(members.size()), ids[members.front()], newRank,
                  config ? config : &inherited, parent.ranksOnThisMachine());
}

trncclResult_t trncclCommDestroy(trncclComm_t comm) {
  if (!comm)
    return report(nullptr, makeError(Code::kInvalidArgument, "trncclCommDestroy: comm is NULL"));
  Status status = comm->impl->flush();
  comm->impl->drainNetwork();
  comm->impl->markDeparted();
  comm->impl->reportTraffic();
  trncclResult_t result = report(comm, status.withContext("trncclCommDestroy: "));
  while (comm->activeCalls.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  delete comm;
  return result;
}

trncclResult_t trncclCommAbort(trncclComm_t comm) {
  if (!comm)
    return report(nullptr, makeError(Code::kInvalidArgument, "trncclCommAbort: comm is NULL"));
  comm->impl->requestAbort();
  // Every call in flight notices the abort at its next progress pass and returns.
  trnccl::Deadline deadline = trnccl::Deadline::after(comm->impl->timeoutSeconds());
  while (comm->activeCalls.load(std::memory_order_acquire) != 0 && !deadline.expired())
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  if (comm->activeCalls.load() != 0) {
    // A thread is stuck outside our control; leaking the handle beats freeing it under it.
    return report(nullptr, makeError(Code::kInternalError,
                                     "trncclCommAbort: %d call(s) did "
                                     "not return; the communicator was not freed",
                                     comm->activeCalls.load()));
  }
  delete comm;
  return trncclSuccess;
}

trncclResult_t trncclCommGetAsyncError(trncclComm_t comm, trncclResult_t* asyncError) {
  if (!comm || !asyncError)
    return report(comm, makeError(Code::kInvalidArgument,
                                  "trncclCommGetAsyncError: comm or asyncError is NULL"));
  trnccl::api::CallGuard guard(comm);
  *asyncError = trnccl::api::toResult(comm->impl->asyncError().code());
  return trncclSuccess;
}

trncclResult_t trncclCommCount(const trncclComm_t comm, int* count) {
  if (!comm || !count)
    return report(comm,
                  makeError(Code::kInvalidArgument, "trncclCommCount: comm or count is NULL"));
  *count = comm->impl->nranks();
  return trncclSuccess;
}

trncclResult_t trncclCommUserRank(const trncclComm_t comm, int* rank) {
  if (!comm || !rank)
    return report(comm,
                  makeError(Code::kInvalidArgument, "trncclCommUserRank: comm or rank is NULL"));
  *rank = comm->impl->rank();
  return trncclSuccess;
}

}  // extern "C"
