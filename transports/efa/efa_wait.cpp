// Sleeping until the network has news: the completion queues' wait descriptors (FI_WAIT_FD),
// armed with fi_trywait and waited on with ppoll. The wait policy (src/comm_wait.cpp) sleeps
// here when the operation it waits for is blocked on an efa peer.
#include <poll.h>
#include <rdma/fi_eq.h>

#include <array>

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

void EfaTransport::sleep(int64_t ns) const {
  constexpr size_t kMaxRails = 32;
  std::array<pollfd, kMaxRails> fds{};
  const size_t n = std::min(waitFds_.size(), kMaxRails);
  for (size_t r = 0; r < n; ++r) fds[r] = pollfd{waitFds_[r], POLLIN, 0};
  const timespec timeout{static_cast<time_t>(ns / 1'000'000'000),
                         static_cast<long>(ns % 1'000'000'000)};
  (void)ppoll(fds.data(), n, &timeout, nullptr);  // woken, timed out or interrupted: all fine
}

}  // namespace trnccl::efa
