#include "work.hpp"

namespace trnccl::torch_ext {

WorkTrnccl::WorkTrnccl(int rank, c10d::OpType type, std::shared_ptr<PendingCall> call,
                       std::shared_ptr<Watcher> watcher)
    : c10d::Work(rank, type), call_(std::move(call)), watcher_(std::move(watcher)) {}

WorkTrnccl::~WorkTrnccl() {
  if (!call_->completed()) watcher_->adopt(call_);
}

bool WorkTrnccl::isCompleted() {
  return call_->poll();
}

bool WorkTrnccl::isSuccess() const {
  return call_->succeeded();
}

std::exception_ptr WorkTrnccl::exception() const {
  return call_->error();
}

std::vector<at::Tensor> WorkTrnccl::result() {
  return call_->outputs();
}

bool WorkTrnccl::wait(std::chrono::milliseconds timeout) {
  call_->wait(timeout == kNoTimeout ? PendingCall::kNoLimit : timeout);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> WorkTrnccl::getFuture() {
  watcher_->adopt(call_);
  return call_->future();
}

}  // namespace trnccl::torch_ext
