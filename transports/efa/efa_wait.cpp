// Sleeping until the network has news: the completion queues' wait descriptors (FI_WAIT_FD),
// armed with fi_trywait and waited on with ppoll. The wait policy (src/comm_wait.cpp) sleeps
// here when the operation it waits for is blocked on an efa peer.
#include <poll.h>
#include <rdma/fi_eq.h>

#include <array>

#include "core/log.hpp"
#include "transports/efa/efa_transport.hpp"

namespace trnccl::efa {

bool EfaTransport::armSleep() {
  if (!canSleep()) return false;
  // fi_trywait succeeds only when nothing is pending, and from then on whatever completes
  // makes the descriptor readable; otherwise the caller reads the queues again first.
  for (auto& rail : rails_) {
    fid* queue = &rail->cq.get()->fid;
    if (fi_trywait(rail->fabric.get(), &queue, 1) != FI_SUCCESS) return false;
  }
  return true;
}

bool EfaTransport::sleep(int64_t ns) const {
  constexpr size_t kMaxRails = 32;
  std::array<pollfd, kMaxRails> fds{};
  const size_t n = std::min(waitFds_.size(), kMaxRails);
  for (size_t r = 0; r < n; ++r) fds[r] = pollfd{waitFds_[r], POLLIN, 0};
  const timespec timeout{static_cast<time_t>(ns / 1'000'000'000),
                         static_cast<long>(ns % 1'000'000'000)};
  return ppoll(fds.data(), n, &timeout, nullptr) > 0;  // else timed out or interrupted
}

void EfaTransport::wokeFor(bool woken, bool progressed) {
  constexpr int kEmptyWakesBeforeNapping = 64;
  emptyWakes_ = woken && !progressed ? emptyWakes_ + 1 : 0;
  if (emptyWakes_ < kEmptyWakesBeforeNapping || napsInsteadOfSleeping()) return;
  napsInsteadOfSleeping_.store(true, std::memory_order_relaxed);
  TRNCCL_INFO(log::kNet,
              "efa: %d wake-ups in a row from %s's completion wait descriptors brought nothing "
              "(the descriptor stays readable): blocked waits nap on a timer instead "
              "(TRNCCL_EFA_SLEEP=1)",
              kEmptyWakesBeforeNapping, rails_.front()->info->fabric_attr->prov_name);
}

}  // namespace trnccl::efa
