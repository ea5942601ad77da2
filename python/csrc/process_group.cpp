// ProcessGroupTrnccl: lifecycle, how a call is issued and tracked, groups, barrier and
// point-to-point. The collectives' argument shapes are in pg_collectives.cpp.
#include "process_group.hpp"

#include "gil.hpp"

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "tensors.hpp"
#include "work.hpp"

namespace trnccl::torch_ext {

trncclConfig_t ProcessGroupTrnccl::configFor(std::chrono::milliseconds timeout,
                                             const std::string& name) {
  trncclConfig_t config = TRNCCL_CONFIG_INITIALIZER;
  // An explicit TRNCCL_TIMEOUT is the operator's knob; otherwise torch's timeout applies.
  const char* env = nullptr;
  int set = 0;
  const bool explicitTimeout =
      trncclGetEnv("TRNCCL_TIMEOUT", &env, &set) == trncclSuccess && set && *env;
  config.timeoutMs = explicitTimeout ? TRNCCL_TIMEOUT_DEFAULT : static_cast<int>(timeout.count());
  config.commName = name.c_str();  // copied by init
  return config;
}

ProcessGroupTrnccl::ProcessGroupTrnccl(const std::string& uniqueId, int rank, int size,
                                       std::chrono::milliseconds timeout, const std::string& name)
    : c10d::ProcessGroup(rank, size), timeout_(timeout), name_(name) {
  if (uniqueId.size() != sizeof(trncclUniqueId))
    throw std::invalid_argument("trnccl: the unique id from the store has " +
                                std::to_string(uniqueId.size()) + " bytes, expected " +
                                std::to_string(sizeof(trncclUniqueId)));
  trncclUniqueId id;
  std::memcpy(id.internal, uniqueId.data(), sizeof(id.internal));
  const trncclConfig_t config = configFor(timeout, name_);
  const trncclResult_t result = trncclCommInitRankConfig(&comm_, size, id, rank, &config);
  if (result != trncclSuccess)
    throwFailure("init of process group '" + name_ + "' (rank " + std::to_string(rank) + " of " +
                     std::to_string(size) + ")",
                 result);
}

ProcessGroupTrnccl::ProcessGroupTrnccl(trncclComm_t adopted, int rank, int size,
                                       std::chrono::milliseconds timeout, const std::string& name)
    : c10d::ProcessGroup(rank, size), comm_(adopted), timeout_(timeout), name_(name) {}

c10::intrusive_ptr<ProcessGroupTrnccl> ProcessGroupTrnccl::split(const ProcessGroupTrnccl& parent,
                                                                 int color, int key,
                                                                 std::chrono::milliseconds timeout,
                                                                 const std::string& name) {
  const trncclConfig_t config = configFor(timeout, name);
  trncclComm_t child = nullptr;
  const trncclResult_t result = trncclCommSplit(parent.comm_, color, key, &child, &config);
  if (result != trncclSuccess)
    parent.throwFailure("split of process group '" + parent.name_ + "' into '" + name + "'",
                        result);
  if (!child) return {};
  int rank = 0, size = 0;
  if (trncclCommUserRank(child, &rank) != trncclSuccess ||
      trncclCommCount(child, &size) != trncclSuccess) {
    (void)trncclCommDestroy(child);
    parent.throwFailure("split of process group '" + parent.name_ + "'", trncclInternalError);
  }
  return c10::make_intrusive<ProcessGroupTrnccl>(child, rank, size, timeout, name);
}

ProcessGroupTrnccl::~ProcessGroupTrnccl() {
  // Python drops the last reference with the GIL held, and finishing a call may need it
  // (a future's Python callbacks, dropping tensors Python shares): let go of it meanwhile.
  WithoutGil noGil;
  // Calls still running finish first (each ends by the communicator's timeout); only then
  // may the communicator, which their requests point into, go away.
  {
    std::lock_guard<std::mutex> lock(callsMutex_);
    for (auto& weak : calls_)
      if (auto call = weak.lock(); call && !call->completed()) watcher_->adopt(call);
    calls_.clear();
  }
  watcher_->drain();
  watcher_.reset();  // joins the thread here if no Work still holds it, without the GIL
  if (comm_) (void)trncclCommDestroy(comm_);
}

std::string ProcessGroupTrnccl::describe(const char* call, uint64_t sequence) const {
  return std::string(call) + " #" + std::to_string(sequence) + " on process group '" + name_ +
         "' (rank " + std::to_string(getRank()) + " of " + std::to_string(getSize()) + ")";
}

void ProcessGroupTrnccl::throwFailure(const std::string& what, trncclResult_t result) const {
  const std::string sentence = "trnccl: " + what + ": " + lastErrorText(comm_, result);
  if (result == trncclInvalidArgument) throw std::invalid_argument(sentence);
  throw std::runtime_error(sentence);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::launch(c10d::OpType type, const char* call,
                                                          const Submit& submit,
                                                          std::vector<at::Tensor> keepAlive,
                                                          std::vector<at::Tensor> outputs,
                                                          Finisher finisher) {
  const std::string what = describe(call, sequence_.fetch_add(1) + 1);
  trncclRequest_t request = nullptr;
  const trncclResult_t result = coalescing_ ? submit(nullptr) : submit(&request);
  if (result != trncclSuccess) throwFailure(what, result);
  auto pending = std::make_shared<PendingCall>(comm_, request, what, std::move(keepAlive),
                                               std::move(outputs), std::move(finisher));
  if (coalescing_) grouped_.push_back(pending);
  {
    std::lock_guard<std::mutex> lock(callsMutex_);
    // Forget calls that ended, so the list stays as long as what is in flight.
    std::erase_if(calls_, [](const std::weak_ptr<PendingCall>& weak) {
      auto call = weak.lock();
      return !call || call->completed();
    });
    calls_.push_back(pending);
  }
  return c10::make_intrusive<WorkTrnccl>(getRank(), type, std::move(pending), watcher_);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::finished(c10d::OpType type, const char* call,
                                                            std::vector<at::Tensor> outputs) {
  auto pending =
      std::make_shared<PendingCall>(comm_, nullptr, describe(call, sequence_.load()),
                                    std::vector<at::Tensor>{}, std::move(outputs), Finisher{});
  pending->settleFromGroup(trncclSuccess, "");
  return c10::make_intrusive<WorkTrnccl>(getRank(), type, std::move(pending), watcher_);
}

void ProcessGroupTrnccl::startCoalescing() {
  if (coalescing_)
    throw std::runtime_error("trnccl: startCoalescing on process group '" + name_ +
                             "' while a coalesced batch is already open");
  if (trncclGroupStart() != trncclSuccess) throwFailure("startCoalescing", trncclInternalError);
  coalescing_ = true;
  grouped_.clear();
}

void ProcessGroupTrnccl::endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& /*reqs*/) {
  if (!coalescing_)
    throw std::runtime_error("trnccl: endCoalescing on process group '" + name_ +
                             "' without startCoalescing");
  coalescing_ = false;
  const trncclResult_t result = trncclGroupEnd();
  const std::string message =
      result == trncclSuccess
          ? std::string()
          : "trnccl: a coalesced batch of " + std::to_string(grouped_.size()) +
                " calls on process group '" + name_ + "': " + lastErrorText(comm_, result);
  for (auto& call : grouped_) call->settleFromGroup(result, message);
  grouped_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::barrier(const c10d::BarrierOptions& /*opts*/) {
  trncclComm_t comm = comm_;
  return launch(c10d::OpType::BARRIER, "barrier",
                [comm](trncclRequest_t* request) {
                  return request ? trncclBarrierAsync(comm, request) : trncclBarrier(comm);
                },
                {}, {});
}

void ProcessGroupTrnccl::monitoredBarrier(const c10d::BarrierOptions& opts, bool /*waitAll*/) {
  // trnccl's barrier already fails naming the rank that did not arrive (dead or late past
  // the timeout), which is what a monitored barrier reports.
  auto work = barrier(opts);
  work->wait(opts.timeout.count() > 0 ? opts.timeout : timeout_);
}

namespace {

void checkP2P(const char* call, const std::vector<at::Tensor>& tensors, int peer, int size,
              int tag) {
  checkCount(call, "tensors", tensors.size(), 1);
  checkCpuDense(call, "tensor", tensors[0]);
  if (peer < 0 || peer >= size)
    throw std::invalid_argument(std::string("trnccl: ") + call + ": peer rank " +
                                std::to_string(peer) + " is outside the group of " +
                                std::to_string(size));
  if (tag != 0)
    throw std::invalid_argument(
        std::string("trnccl: ") + call + ": tag " + std::to_string(tag) +
        " is not supported (trnccl matches messages between two ranks in the order they "
        "were issued; use tag 0, or a separate process group per stream of messages)");
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::send(std::vector<at::Tensor>& tensors,
                                                        int dstRank, int tag) {
  checkP2P("send", tensors, dstRank, getSize(), tag);
  at::Tensor source = tensors[0].contiguous();
  const MovedType moved = movedType(source);
  const size_t count = source.numel() * moved.elementsPerItem;
  const void* data = source.data_ptr();
  trncclComm_t comm = comm_;
  return launch(c10d::OpType::SEND, "send",
                [=](trncclRequest_t* request) {
                  return request ? trncclSendAsync(data, count, moved.type, dstRank, comm, request)
                                 : trncclSend(data, count, moved.type, dstRank, comm);
                },
                {source}, {});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::recv(std::vector<at::Tensor>& tensors,
                                                        int srcRank, int tag) {
  checkP2P("recv", tensors, srcRank, getSize(), tag);
  at::Tensor target = tensors[0];
  at::Tensor staging = target.is_contiguous() ? target : at::empty_like(target).contiguous();
  const MovedType moved = movedType(staging);
  const size_t count = staging.numel() * moved.elementsPerItem;
  void* data = staging.data_ptr();
  trncclComm_t comm = comm_;
  Finisher finisher;
  if (!staging.is_same(target)) finisher = [target, staging]() mutable { target.copy_(staging); };
  return launch(
      c10d::OpType::RECV, "recv",
      [=](trncclRequest_t* request) {
        return request ? trncclRecvAsync(data, count, moved.type, srcRank, comm, request)
                       : trncclRecv(data, count, moved.type, srcRank, comm);
      },
      {staging, target}, {target}, std::move(finisher));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::recvAnysource(std::vector<at::Tensor>&, int) {
  throw std::invalid_argument(
      "trnccl: recv from any source is not supported (trnccl's messages name their peer); "
      "pass src=");
}

}  // namespace trnccl::torch_ext
