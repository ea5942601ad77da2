// Which network interfaces are near a set of CPUs, from the hwloc topology: the default rails
// of the efa transport are the NICs near the rank's own CPUs (on a trn1.32xlarge, the EFA
// devices attached to the rank's NUMA node), so that no rank pulls its traffic across the
// socket interconnect.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "topology/device_graph.hpp"

namespace trnccl::topology {

// A NIC as libfabric describes it (fi_info->nic and the domain name).
struct NicCandidate {
  std::string name;  // domain name ("rdmap16s27-rdm", "lo")
  bool hasPci = false;
  uint32_t pciDomain = 0;
  uint8_t pciBus = 0, pciDevice = 0, pciFunction = 0;
};

class HostTopology {
 public:
  // This machine, or the hwloc XML file `xmlPath` (TRNCCL_TOPO_XML) when it is not empty.
  static Result<std::unique_ptr<HostTopology>> load(const std::string& xmlPath);
  ~HostTopology();
  HostTopology(const HostTopology&) = delete;
  HostTopology& operator=(const HostTopology&) = delete;

  // Indices of the candidates near `cpuList` ("0-15,32-47"; empty = the CPUs this process is
  // bound to, all of them when it is not bound). A NIC is near when the CPUs local to it (its
  // closest non-I/O ancestor: package or NUMA node) overlap those CPUs. A NIC the topology
  // cannot place (no PCI address, a virtual interface such as lo, a device hwloc does not
  // list) counts as near: nothing says otherwise. If no NIC is near, every one is returned,
  // so that a rank bound far from all NICs still has rails.
  Result<std::vector<size_t>> nearNics(const std::vector<NicCandidate>& nics,
                                       const std::string& cpuList) const;

  // The NICs hwloc lists for the topology model: its OpenFabrics devices (EFA), or when there
  // are none its network interfaces, each with the NUMA node its PCI device hangs off (-1 when
  // hwloc cannot place it, as for virtual interfaces). Speed is not known here (0).
  std::vector<Nic> listNics() const;

 private:
  struct Impl;
  explicit HostTopology(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace trnccl::topology
