// Buffers the user registers with a communicator (trncclCommRegister): see comm.hpp.
#include <algorithm>

#include "comm.hpp"
#include "core/strformat.hpp"

namespace trnccl {

Result<Communicator::Registration*> Communicator::registerBuffer(const void* addr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.isOk()) return failure_;
  auto registration = std::make_unique<Registration>();
  registration->addr = addr;
  registration->bytes = bytes;
  if (efa_) {
    auto made = efa_->registerUserBuffer(addr, bytes);
    if (!made.isOk())
      return made.status().withContext(strformat("rank %d on %s: ", rank_, options_.name.c_str()));
    registration->efa = std::move(made.value());
  }
  registrations_.push_back(std::move(registration));
  return registrations_.back().get();
}

Status Communicator::deregisterBuffer(Registration* registration) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::find_if(registrations_.begin(), registrations_.end(),
                         [&](const auto& r) { return r.get() == registration; });
  if (it == registrations_.end())
    return makeError(Code::kInvalidArgument,
                     "rank %d on %s: handle %p is not a registration of this communicator "
                     "(deregistered already, or given out by another communicator)",
                     rank_, options_.name.c_str(), static_cast<void*>(registration));
  // After a failure the endpoints are closed and nothing is in flight; the registrations
  // close with the transport.
  if (efa_ && failure_.isOk()) {
    Status status = efa_->deregisterUserBuffer(registration->efa);
    if (!status.isOk())
      return makeError(status.code(),
                       "rank %d on %s: cannot deregister %zu bytes at %p: %s; wait for the "
                       "calls that use it (trncclWait, or the blocking call's return) first",
                       rank_, options_.name.c_str(), registration->bytes, registration->addr,
                       status.message().c_str());
  }
  registrations_.erase(it);
  return Status::ok();
}

}  // namespace trnccl
