// libfabric, held safely: RAII owners for fid objects (fi_close in the deleter, in reverse order
// of creation), provider selection with the hints DESIGN.md section 5 asks for, and one Rail =
// fabric + domain + completion queue + address vector + RDM endpoint.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <memory>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace trnccl::efa {

// Owns one fid; closing happens exactly once, whatever path leaves the scope.
template <typename T>
class Fid {
 public:
  Fid() = default;
  explicit Fid(T* raw) : raw_(raw) {}
  Fid(Fid&& other) noexcept : raw_(other.raw_) { other.raw_ = nullptr; }
  Fid& operator=(Fid&& other) noexcept {
    if (this != &other) {
      reset();
      raw_ = other.raw_;
      other.raw_ = nullptr;
    }
    return *this;
  }
  Fid(const Fid&) = delete;
  Fid& operator=(const Fid&) = delete;
  ~Fid() { reset(); }
  T* get() const { return raw_; }
  T** out() {
    reset();
    return &raw_;
  }
  explicit operator bool() const { return raw_ != nullptr; }
  void reset() {
    if (raw_) fi_close(&raw_->fid);
    raw_ = nullptr;
  }

 private:
  T* raw_ = nullptr;
};

struct InfoDeleter {
  void operator()(fi_info* info) const { fi_freeinfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

// The variables that pin libfabric's socket providers to one interface: FI_TCP_IFACE for tcp
// (and tcp;ofi_rxm), FI_NET_IFACE for net. Jobs on one machine set both to lo.
inline constexpr const char* kSocketInterfaceVariables[] = {"FI_TCP_IFACE", "FI_NET_IFACE"};
// Sets each of them to iface in this process's environment; overwrite=false keeps the user's.
inline void pinSocketProviders(const char* iface, bool overwrite) {
  for (const char* name : kSocketInterfaceVariables) setenv(name, iface, overwrite ? 1 : 0);
}

// libfabric settings trnccl chooses when the user has not: ofi_rxm's FI_OFI_RXM_MSG_RX_SIZE.
// Unset, libfabric 1.17's rxm posts all 1024 buffers of its receive pool's first chunk to the
// shared receive context, so the first repost grows the pool by another 1024 x 16 KiB chunk
// (about 4200 page faults, 10-14 ms) at a random point 20-900 messages into the job: one row of
// a `sendrecv_perf -w 5 -n 50` read 200 us instead of 12. With 256 posted it never grows.
// Applied once per process, before its first fi_getinfo (libfabric reads provider variables
// when it loads the providers; if something else in the process loaded them first, e.g. an
// MPI library's ofi components, this comes too late and libfabric's value stays).
// Returns what it set, e.g. "FI_OFI_RXM_MSG_RX_SIZE=256", or "" when the user's values stand.
// setenv races with getenv on other threads: this runs once, inside the first efa
// communicator's init; a program that initialises communicators on several threads at once and
// reads its environment meanwhile should set the variable itself.
const std::string& applyProviderDefaults();

// "fi_tsend: No data available (-61)".
std::string fiError(const char* call, ssize_t rc);

struct ProviderChoice {
  InfoPtr infos;              // every matching fi_info, in libfabric's order
  std::vector<fi_info*> use;  // the ones the rails use (one per rail)
  bool rma = false;           // FI_RMA granted
  std::string railReason;     // how the rails were picked, for the INFO line
};

// Picks the provider: `wanted` (TRNCCL_FI_PROVIDER) if set, else efa, tcp with native RDM
// endpoints (net), tcp;ofi_rxm, shm in that order. The error lists what fi_getinfo offered so the
// user can pick. rails = 0 means "one per distinct domain (NIC) the provider offers that is near
// this process's CPUs" (hwloc, from topologyXml when set), otherwise exactly that many endpoints
// (several on one domain when the provider has fewer NICs: how loopback exercises striping).
Result<ProviderChoice> chooseProvider(const std::string& wanted, int rails,
                                      const std::string& topologyXml = "");

// The infos rails may use, one per domain: see fabric.cpp for which are left out and why.
std::vector<fi_info*> railCandidates(fi_info* infos);

// What fi_getinfo offers without our hints: "tcp;ofi_rxm (lo), shm (shm), ...".
std::string describeOffered();

struct Rail {
  fi_info* info = nullptr;  // owned by the ProviderChoice
  Fid<fid_fabric> fabric;
  Fid<fid_domain> domain;
  Fid<fid_cq> cq;
  Fid<fid_av> av;
  Fid<fid_ep> ep;       // declared last: destroyed first
  std::string address;  // fi_getname
  size_t maxSends = 0;  // outstanding sends kept, and receives: separate budgets, or a
  size_t maxRecvs = 0;  // rank whose sends fill the queue could never post a receive
  size_t injectBytes = 0;
  size_t cqDataBytes = 0;  // remote CQ data the provider carries (the message size check)
  int waitFd = -1;         // the completion queue's wait descriptor (FI_WAIT_FD), if any
};

// waitObject: ask for a completion queue with a wait descriptor (FI_WAIT_FD), falling back to
// none where the provider refuses it (Rail::waitFd stays -1).
Result<std::unique_ptr<Rail>> openRail(fi_info* info, bool waitObject = false);

// Inserts one address per peer; returns the fi_addr_t of each, in order.
Result<std::vector<fi_addr_t>> insertAddresses(Rail& rail, const std::vector<std::string>& addrs);

}  // namespace trnccl::efa
