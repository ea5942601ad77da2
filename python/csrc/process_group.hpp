// torch.distributed's ProcessGroup over a trnccl communicator (backend name "trnccl").
//
// Every call is issued at once with trnccl's non-blocking form on the caller's thread, so bad
// arguments raise right there; Work.wait() then drives it on the waiting thread (trnccl's wait
// policy: spin briefly, then sleep), and a watcher thread finishes calls whose future is
// awaited instead. Tensors that are not contiguous, and list-shaped inputs and outputs, go
// through a contiguous staging tensor that is copied back when the call has ended.
#pragma once

#include <trnccl.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pending_call.hpp"
#include "watcher.hpp"

namespace trnccl::torch_ext {

class ProcessGroupTrnccl : public c10d::ProcessGroup {
 public:
  // uniqueId: the bytes of rank 0's trncclUniqueId (exchanged through torch's store).
  // timeout bounds every wait; TRNCCL_TIMEOUT, when set, takes precedence.
  ProcessGroupTrnccl(const std::string& uniqueId, int rank, int size,
                     std::chrono::milliseconds timeout, const std::string& name);
  // A subgroup by trncclCommSplit of parent's communicator: collective over parent (every
  // rank calls it; color TRNCCL_SPLIT_NOCOLOR for ranks outside the subgroup, which get
  // nullptr). key orders the subgroup's ranks.
  static c10::intrusive_ptr<ProcessGroupTrnccl> split(const ProcessGroupTrnccl& parent, int color,
                                                      int key, std::chrono::milliseconds timeout,
                                                      const std::string& name);
  ~ProcessGroupTrnccl() override;

  const std::string getBackendName() const override { return "trnccl"; }
  trncclComm_t comm() const { return comm_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& name() const { return name_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;
  // batch_isend_irecv: the calls in between run as one trnccl group (so a ring of sends and
  // receives cannot deadlock); their Works complete when the group ends.
  void startCoalescing() override;
  void setSequenceNumberForGroup() override {}  // every rank starts at 0 and counts its calls
  uint64_t getSequenceNumberForGroup() override { return sequence_.load(); }
  void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& reqs) override;

  // Issues one call: submit(&request) with trnccl's *Async form, or submit(nullptr) with the
  // blocking form inside a coalescing group. keepAlive: tensors trnccl reads or writes;
  // outputs: what Work.result() returns; finisher: runs after success (copies back).
  using Submit = std::function<trncclResult_t(trncclRequest_t*)>;
  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, const char* call, const Submit& submit,
                                        std::vector<at::Tensor> keepAlive,
                                        std::vector<at::Tensor> outputs, Finisher finisher = {});
  // A Work that has already succeeded (calls with nothing to move on any rank).
  c10::intrusive_ptr<c10d::Work> finished(c10d::OpType type, const char* call,
                                          std::vector<at::Tensor> outputs);

  // Adopts a communicator made by trncclCommSplit (what split() returns).
  ProcessGroupTrnccl(trncclComm_t adopted, int rank, int size, std::chrono::milliseconds timeout,
                     const std::string& name);

 private:
  static trncclConfig_t configFor(std::chrono::milliseconds timeout, const std::string& name);
  std::string describe(const char* call, uint64_t sequence) const;
  [[noreturn]] void throwFailure(const std::string& what, trncclResult_t result) const;

  trncclComm_t comm_ = nullptr;
  std::chrono::milliseconds timeout_;
  std::string name_;
  std::shared_ptr<Watcher> watcher_ = std::make_shared<Watcher>();
  std::atomic<uint64_t> sequence_{0};
  bool coalescing_ = false;
  std::vector<std::shared_ptr<PendingCall>> grouped_;
  // Every call not known to have ended, so that destruction finishes them before the
  // communicator goes away (a Work may outlive its process group).
  std::mutex callsMutex_;
  std::vector<std::weak_ptr<PendingCall>> calls_;
};

}  // namespace trnccl::torch_ext
