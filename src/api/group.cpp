// trncclGroupStart/End: calls are queued per thread and launched at the outermost GroupEnd.
// Consecutive point-to-point calls on one communicator fuse into one operation whose steps
// progress together; collectives keep their own operations, in call order.
#include "api/group.hpp"

#include <sched.h>

#include <algorithm>
#include <memory>
#include <vector>

using trnccl::Code;
using trnccl::CollArgs;
using trnccl::CollKind;
using trnccl::makeError;
using trnccl::api::report;

namespace trnccl::api {
namespace {

struct PendingCall {
  trncclComm_t comm;
  CollArgs args;
};

struct GroupState {
  int depth = 0;
  std::vector<PendingCall> calls;
};

thread_local GroupState group;

struct Launched {
  trncclComm_t comm;
  std::shared_ptr<trnccl::Operation> op;
};

// Waits the way a blocking call does. One communicator (the usual group, such as a ring
// exchange's send and receive) waits for its last operation, which runs after the others,
// through Communicator::wait: its spin budget (TRNCCL_SPIN_COUNT, cut short when ranks
// outnumber cores) and the word it watches. A fixed budget here had a group spin 1000 passes
// while the peer it waited for had no core. Several communicators are progressed together,
// so that operations on different communicators that depend on each other cannot deadlock,
// within the smallest of their spin budgets.
void waitForAll(const std::vector<Launched>& launched) {
  if (launched.empty()) return;
  bool oneComm = true;
  int spinPasses = launched.front().comm->impl->spinPasses();
  for (const auto& l : launched) {
    oneComm = oneComm && l.comm == launched.front().comm;
    spinPasses = std::min(spinPasses, l.comm->impl->spinPasses());
  }
  if (oneComm) {
    // Its result is each operation's own, reported by the caller.
    (void)launched.back().comm->impl->wait(launched.back().op, -1);
    return;
  }
  int polls = 0;
  for (bool pending = true; pending;) {
    pending = false;
    for (const auto& l : launched)
      if (!l.comm->impl->test(l.op)) pending = true;
    if (pending && ++polls > spinPasses) sched_yield();
  }
}

}  // namespace

bool groupActive() {
  return group.depth > 0;
}

void groupAdd(trncclComm_t comm, CollArgs&& args) {
  group.calls.push_back({comm, std::move(args)});
}

}  // namespace trnccl::api

extern "C" trncclResult_t trncclGroupStart(void) {
  ++trnccl::api::group.depth;
  return trncclSuccess;
}

extern "C" trncclResult_t trncclGroupEnd(void) {
  auto& group = trnccl::api::group;
  if (group.depth == 0)
    return report(nullptr, makeError(Code::kInvalidUsage,
                                     "trncclGroupEnd without a matching trncclGroupStart"));
  if (--group.depth > 0) return trncclSuccess;
  std::vector<trnccl::api::PendingCall> calls;
  calls.swap(group.calls);
  // The calls' vector goes back to this thread's group afterwards, so that its capacity is
  // reused: a training loop's groups then allocate nothing here.
  struct Recycle {
    std::vector<trnccl::api::PendingCall>& calls;
    ~Recycle() {
      calls.clear();
      if (trnccl::api::group.calls.empty()) trnccl::api::group.calls.swap(calls);
    }
  } recycle{calls};

  // The usual group, point-to-point calls on one communicator (a ring exchange's send and
  // receive), fuses into one operation that lives on this stack, like a blocking call's.
  if (!calls.empty() && std::all_of(calls.begin(), calls.end(), [&](const auto& call) {
        return call.comm == calls.front().comm && call.args.kind == CollKind::kSendRecv;
      })) {
    thread_local std::vector<CollArgs> batch;
    batch.clear();
    for (auto& call : calls) batch.push_back(std::move(call.args));  // calls is cleared after
    trncclComm_t comm = calls.front().comm;
    trnccl::api::CallGuard guard(comm);
    return report(comm, comm->impl->run(batch.data(), batch.size()));
  }

  std::vector<trnccl::api::Launched> launched;
  // Like every call, a group counts as in progress on each of its communicators, so that
  // trncclCommAbort from another thread waits for it to return.
  std::vector<std::unique_ptr<trnccl::api::CallGuard>> guards;
  for (const auto& call : calls) {
    bool seen = false;
    for (const auto& other : calls) {
      if (&other == &call) break;
      seen = seen || other.comm == call.comm;
    }
    if (!seen) guards.push_back(std::make_unique<trnccl::api::CallGuard>(call.comm));
  }
  trncclResult_t result = trncclSuccess;
  size_t i = 0;
  while (i < calls.size() && result == trncclSuccess) {
    trncclComm_t comm = calls[i].comm;
    std::vector<CollArgs> batch = {calls[i].args};
    size_t j = i + 1;
    if (calls[i].args.kind == CollKind::kSendRecv) {
      // Fuse every later point-to-point call on this communicator up to its next collective.
      for (; j < calls.size(); ++j) {
        if (calls[j].comm != comm) continue;
        if (calls[j].args.kind != CollKind::kSendRecv) break;
        batch.push_back(calls[j].args);
        calls[j].comm = nullptr;  // consumed
      }
    }
    auto op = comm->impl->enqueue(batch);
    if (!op.isOk())
      result = report(comm, op.status().withContext("trncclGroupEnd: "));
    else
      launched.push_back({comm, op.value()});
    do {
      ++i;
    } while (i < calls.size() && calls[i].comm == nullptr);
  }
  trnccl::api::waitForAll(launched);
  for (auto& l : launched) {
    trncclResult_t r = report(l.comm, l.op->result);
    if (result == trncclSuccess) result = r;
  }
  return result;
}
