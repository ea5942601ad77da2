#include "transports/efa/fabric.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "core/strformat.hpp"
#include "topology/nic_locality.hpp"

namespace trnccl::efa {

std::string fiError(const char* call, ssize_t rc) {
  return strformat("%s: %s (%zd)", call, fi_strerror(static_cast<int>(-rc)), rc);
}

const std::string& applyProviderDefaults() {
  static const std::string applied = [] {
    std::string set;
    for (const auto& [name, value] : {std::pair{"FI_OFI_RXM_MSG_RX_SIZE", "256"}}) {
      if (std::getenv(name)) continue;
      setenv(name, value, 0);
      set += strformat("%s%s=%s", set.empty() ? "" : " ", name, value);
    }
    return set;
  }();
  return applied;
}

namespace {

constexpr uint32_t kApiVersion = FI_VERSION(1, 11);

// The hints every provider must accept: reliable datagram endpoints with tagged and plain
// messages, the registration modes EFA requires (a provider that needs fewer returns fewer),
// and the context space we always provide.
InfoPtr makeHints(const std::string& provider, bool rma) {
  InfoPtr hints(fi_allocinfo());
  if (!hints) return hints;
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_TAGGED | (rma ? FI_RMA : 0);
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;  // the communicator serialises calls
  if (!provider.empty()) hints->fabric_attr->prov_name = strdup(provider.c_str());
  return hints;
}

// exact: keep only infos of that very provider. fi_getinfo also answers a core provider's name
// with utility providers layered on it ("tcp" with "tcp;ofi_rxm"), which the default order
// tries separately.
Result<InfoPtr> getInfo(const std::string& provider, bool rma, bool exact) {
  applyProviderDefaults();
  InfoPtr hints = makeHints(provider, rma);
  if (!hints) return makeError(Code::kSystemError, "fi_allocinfo failed (out of memory)");
  fi_info* found = nullptr;
  int rc = fi_getinfo(kApiVersion, nullptr, nullptr, 0, hints.get(), &found);
  if (rc != 0) return makeError(Code::kSystemError, "%s", fiError("fi_getinfo", rc).c_str());
  InfoPtr all(found);
  if (!exact) return all;
  std::vector<const fi_info*> matches;
  for (const fi_info* i = all.get(); i; i = i->next)
    if (provider == i->fabric_attr->prov_name) matches.push_back(i);
  InfoPtr kept;  // built back to front, so libfabric's order stays
  for (auto i = matches.rbegin(); i != matches.rend(); ++i) {
    fi_info* copy = fi_dupinfo(*i);
    if (!copy) return makeError(Code::kSystemError, "fi_dupinfo failed (out of memory)");
    copy->next = kept.release();
    kept.reset(copy);
  }
  if (!kept)
    return makeError(Code::kSystemError, "%s offers no endpoint of its own (only layered ones)",
                     provider.c_str());
  return kept;
}

// The domains whose NIC is near this process's CPUs (hwloc); all of them when only one.
Result<std::vector<size_t>> nearDomains(const std::vector<fi_info*>& domains,
                                        const std::string& topologyXml) {
  std::vector<size_t> all(domains.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  if (domains.size() < 2) return all;
  std::vector<topology::NicCandidate> nics;
  for (fi_info* info : domains) {
    topology::NicCandidate nic;
    nic.name = info->domain_attr->name ? info->domain_attr->name : "";
    if (info->nic && info->nic->bus_attr && info->nic->bus_attr->bus_type == FI_BUS_PCI) {
      const fi_pci_attr& pci = info->nic->bus_attr->attr.pci;
      nic.hasPci = true;
      nic.pciDomain = pci.domain_id;
      nic.pciBus = pci.bus_id;
      nic.pciDevice = pci.device_id;
      nic.pciFunction = pci.function_id;
    }
    nics.push_back(nic);
  }
  auto host = topology::HostTopology::load(topologyXml);
  TRNCCL_RETURN_IF_ERROR(host.status());
  return host.value()->nearNics(nics, "");
}

}  // namespace

std::string describeOffered() {
  applyProviderDefaults();
  fi_info* all = nullptr;
  InfoPtr hints(fi_allocinfo());
  if (!hints) return "(fi_allocinfo failed)";
  hints->ep_attr->type = FI_EP_RDM;
  if (fi_getinfo(kApiVersion, nullptr, nullptr, 0, hints.get(), &all) != 0 || !all)
    return "no RDM provider at all";
  InfoPtr owner(all);
  std::set<std::string> seen;
  std::string text;
  for (fi_info* i = all; i; i = i->next) {
    std::string item =
        strformat("%s (%s%s%s)", i->fabric_attr->prov_name, i->domain_attr->name,
                  (i->caps & FI_TAGGED) ? "" : ", no FI_TAGGED", (i->caps & FI_RMA) ? ", rma" : "");
    if (!seen.insert(item).second) continue;
    if (!text.empty()) text += ", ";
    text += item;
  }
  return text;
}

namespace {

bool isLoopback(const fi_info* info) {
  if (info->addr_format != FI_SOCKADDR_IN || !info->src_addr) return false;
  const auto* in = static_cast<const sockaddr_in*>(info->src_addr);
  return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
}

}  // namespace

// One info per distinct domain (NIC), IPv4 addressing where the provider offers both. A peer
// reads a rail's address and connects to it, so every rail must be reachable from other
// hosts: an interface on another IP network than the first (a container bridge, say) carries
// an address that may lead elsewhere, and a loopback one leads into the peer's own host (with
// tcp over a veth pair plus lo, fragments striped onto lo never arrived). Loopback is used
// only when nothing else is offered: one machine, FI_TCP_IFACE=lo.
std::vector<fi_info*> railCandidates(fi_info* infos) {
  std::vector<fi_info*> domains, loopback;
  std::set<std::string> names;
  for (fi_info* i = infos; i; i = i->next) {
    if (i->addr_format == FI_SOCKADDR_IN6) continue;
    if (!names.insert(i->domain_attr->name).second) continue;
    (isLoopback(i) ? loopback : domains).push_back(i);
  }
  if (domains.empty()) return loopback;
  // Socket-addressed providers (tcp) name the fabric after the interface's network; EFA
  // devices are told apart by their own addresses and all reach the same fabric.
  const fi_info* first = domains.front();
  if (first->addr_format == FI_SOCKADDR_IN)
    std::erase_if(domains, [&](const fi_info* i) {
      return std::strcmp(first->fabric_attr->name, i->fabric_attr->name) != 0;
    });
  return domains;
}

namespace {

struct ProviderCandidate {
  std::string name;
  bool exact;  // that provider's own endpoints only, not utility providers layered on it
};

// Without TRNCCL_FI_PROVIDER: EFA; then TCP with reliable datagram endpoints implemented in the
// provider itself ("net" in libfabric 1.16-1.17, which later releases made their "tcp");
// then tcp under the ofi_rxm utility provider; then shm. The native path skips rxm's
// rendezvous round trip above its 16 KiB eager limit: 2-rank all-reduce on loopback, same
// runs, net against tcp;ofi_rxm: 32 KiB 19 against 52 us, 256 KiB 75 against 129 us, 2 MiB
// 456 against 649 us (docs/ARCHITECTURE.md, efa transport).
const std::vector<ProviderCandidate> kDefaultProviderOrder = {
    {"efa", false}, {"net", true}, {"tcp", true}, {"tcp;ofi_rxm", false}, {"shm", false}};

}  // namespace

Result<ProviderChoice> chooseProvider(const std::string& wanted, int rails,
                                      const std::string& topologyXml) {
  std::vector<ProviderCandidate> order;
  if (!wanted.empty())
    order.push_back({wanted, false});
  else
    order = kDefaultProviderOrder;
  std::string tried;
  for (const auto& [provider, exact] : order) {
    ProviderChoice choice;
    auto infos = getInfo(provider, /*rma=*/true, exact);
    if (infos.isOk()) {
      choice.rma = true;
    } else {
      infos = getInfo(provider, /*rma=*/false, exact);
    }
    if (!infos.isOk()) {
      tried += strformat("%s%s: %s", tried.empty() ? "" : "; ", provider.c_str(),
                         infos.status().message().c_str());
      continue;
    }
    choice.infos = std::move(infos.value());
    auto domains = railCandidates(choice.infos.get());
    if (domains.empty()) domains.push_back(choice.infos.get());
    if (rails > 0) {
      for (int r = 0; r < rails; ++r) choice.use.push_back(domains[r % domains.size()]);
      choice.railReason = strformat("TRNCCL_EFA_RAILS=%d", rails);
      return choice;
    }
    auto near = nearDomains(domains, topologyXml);
    TRNCCL_RETURN_IF_ERROR(near.status());
    for (size_t i : near.value()) choice.use.push_back(domains[i]);
    choice.railReason =
        strformat("%zu of %zu NIC(s) near this rank's CPUs", choice.use.size(), domains.size());
    return choice;
  }
  return makeError(Code::kSystemError,
                   "no libfabric provider accepted trnccl's needs (FI_EP_RDM with FI_MSG and "
                   "FI_TAGGED): %s. fi_getinfo offers: %s. Set TRNCCL_FI_PROVIDER to one of "
                   "those (e.g. 'net' with FI_NET_IFACE=lo, or 'tcp;ofi_rxm' with "
                   "FI_TCP_IFACE=lo, on one machine)",
                   tried.c_str(), describeOffered().c_str());
}

Result<std::unique_ptr<Rail>> openRail(fi_info* info, bool waitObject) {
  auto rail = std::make_unique<Rail>();
  rail->info = info;
  const char* prov = info->fabric_attr->prov_name;
  auto fail = [&](const char* call, int rc) {
    return makeError(Code::kSystemError, "libfabric provider %s, domain %s: %s", prov,
                     info->domain_attr->name, fiError(call, rc).c_str());
  };
  int rc = fi_fabric(info->fabric_attr, rail->fabric.out(), nullptr);
  if (rc) return fail("fi_fabric", rc);
  rc = fi_domain(rail->fabric.get(), info, rail->domain.out(), nullptr);
  if (rc) return fail("fi_domain", rc);
  fi_cq_attr cqAttr{};
  cqAttr.format = FI_CQ_FORMAT_TAGGED;
  cqAttr.size = std::max<size_t>(info->tx_attr->size + info->rx_attr->size, 256);
  // A wait descriptor lets a rank blocked on a peer sleep in poll() (src/comm_wait.cpp). A
  // provider that offers none (FI_WAIT_NONE only) still opens, and its ranks keep yielding.
  cqAttr.wait_obj = waitObject ? FI_WAIT_FD : FI_WAIT_NONE;
  rc = fi_cq_open(rail->domain.get(), &cqAttr, rail->cq.out(), nullptr);
  if (rc && waitObject) {
    cqAttr.wait_obj = FI_WAIT_NONE;
    rc = fi_cq_open(rail->domain.get(), &cqAttr, rail->cq.out(), nullptr);
  }
  if (rc) return fail("fi_cq_open", rc);
  if (cqAttr.wait_obj == FI_WAIT_FD &&
      fi_control(&rail->cq.get()->fid, FI_GETWAIT, &rail->waitFd) != 0)
    rail->waitFd = -1;
  fi_av_attr avAttr{};
  avAttr.type = FI_AV_TABLE;
  rc = fi_av_open(rail->domain.get(), &avAttr, rail->av.out(), nullptr);
  if (rc) return fail("fi_av_open", rc);
  rc = fi_endpoint(rail->domain.get(), info, rail->ep.out(), nullptr);
  if (rc) return fail("fi_endpoint", rc);
  rc = fi_ep_bind(rail->ep.get(), &rail->cq.get()->fid, FI_TRANSMIT | FI_RECV);
  if (rc) return fail("fi_ep_bind(cq)", rc);
  rc = fi_ep_bind(rail->ep.get(), &rail->av.get()->fid, 0);
  if (rc) return fail("fi_ep_bind(av)", rc);
  rc = fi_enable(rail->ep.get());
  if (rc) return fail("fi_enable", rc);
  char name[256];
  size_t length = sizeof(name);
  rc = fi_getname(&rail->ep.get()->fid, name, &length);
  if (rc) return fail("fi_getname", rc);
  rail->address.assign(name, length);
  // Keep well inside the provider's queues: FI_EAGAIN stays the exception, not the rule.
  rail->maxSends = std::clamp<size_t>(info->tx_attr->size / 2, 8, 256);
  rail->maxRecvs = std::clamp<size_t>(info->rx_attr->size / 2, 8, 256);
  rail->injectBytes = info->tx_attr->inject_size;
  rail->cqDataBytes = info->domain_attr->cq_data_size;
  return rail;
}

Result<std::vector<fi_addr_t>> insertAddresses(Rail& rail, const std::vector<std::string>& addrs) {
  std::vector<fi_addr_t> out(addrs.size(), FI_ADDR_NOTAVAIL);
  for (size_t i = 0; i < addrs.size(); ++i) {
    if (addrs[i].empty()) continue;  // a peer reached another way (shm), or this rank
    int rc = fi_av_insert(rail.av.get(), addrs[i].data(), 1, &out[i], 0, nullptr);
    if (rc != 1)
      return makeError(Code::kSystemError, "fi_av_insert of rank %zu's address failed (%d)", i, rc);
  }
  return out;
}

}  // namespace trnccl::efa
