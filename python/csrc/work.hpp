// The c10d::Work that torch hands back for every trnccl call: a thin handle on a PendingCall.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <memory>

#include "pending_call.hpp"
#include "watcher.hpp"

namespace trnccl::torch_ext {

class WorkTrnccl : public c10d::Work {
 public:
  WorkTrnccl(int rank, c10d::OpType type, std::shared_ptr<PendingCall> call,
             std::shared_ptr<Watcher> watcher);
  // A call still running when its Work is dropped is handed to the watcher, which keeps its
  // tensors alive until it ends.
  ~WorkTrnccl() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}
  // timeout == kNoTimeout: until the communicator's timeout (the group's timeout, or
  // TRNCCL_TIMEOUT) ends the call, with trnccl's sentence naming the peer.
  bool wait(std::chrono::milliseconds timeout) override;
  // The future completes without anyone calling wait(): the watcher drives the call.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  std::shared_ptr<PendingCall> call_;
  std::shared_ptr<Watcher> watcher_;
};

}  // namespace trnccl::torch_ext
