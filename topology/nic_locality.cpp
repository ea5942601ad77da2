#include "topology/nic_locality.hpp"

#include <hwloc.h>

#include <cstring>

namespace trnccl::topology {

struct HostTopology::Impl {
  hwloc_topology_t topology = nullptr;
  ~Impl() {
    if (topology) hwloc_topology_destroy(topology);
  }
};

HostTopology::HostTopology(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HostTopology::~HostTopology() = default;

Result<std::unique_ptr<HostTopology>> HostTopology::load(const std::string& xmlPath) {
  auto impl = std::make_unique<Impl>();
  if (hwloc_topology_init(&impl->topology) != 0) {
    impl->topology = nullptr;
    return makeError(Code::kSystemError, "hwloc_topology_init failed: %s", std::strerror(errno));
  }
  // PCI devices and OS devices (network, OpenFabrics) are what locality is about.
  hwloc_topology_set_io_types_filter(impl->topology, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  // Linux's sysfs gives the same PCI tree; the libpciaccess-based "pci" plugin leaks its
  // allocations (LeakSanitizer) and is slower.
  hwloc_topology_set_components(impl->topology, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
  if (!xmlPath.empty() && hwloc_topology_set_xml(impl->topology, xmlPath.c_str()) != 0)
    return makeError(Code::kInvalidArgument,
                     "TRNCCL_TOPO_XML=%s: hwloc cannot read it as a topology XML file (%s)",
                     xmlPath.c_str(), std::strerror(errno));
  if (hwloc_topology_load(impl->topology) != 0)
    return makeError(Code::kSystemError, "hwloc_topology_load%s%s failed: %s",
                     xmlPath.empty() ? "" : " of ", xmlPath.c_str(), std::strerror(errno));
  return std::unique_ptr<HostTopology>(new HostTopology(std::move(impl)));
}

namespace {

struct Bitmap {
  hwloc_bitmap_t raw = hwloc_bitmap_alloc();
  ~Bitmap() { hwloc_bitmap_free(raw); }
};

// The PCI device of a NIC: by bus id, else the one whose OS device carries the domain's name
// (EFA domains are "<device>-rdm"; network interfaces are their own name).
hwloc_obj_t findDevice(hwloc_topology_t topology, const NicCandidate& nic) {
  if (nic.hasPci)
    if (hwloc_obj_t dev = hwloc_get_pcidev_by_busid(topology, nic.pciDomain, nic.pciBus,
                                                    nic.pciDevice, nic.pciFunction))
      return dev;
  for (hwloc_obj_t os = hwloc_get_next_osdev(topology, nullptr); os;
       os = hwloc_get_next_osdev(topology, os)) {
    if (!os->name) continue;
    const std::string name = os->name;
    if (nic.name == name || nic.name.rfind(name + "-", 0) == 0) return os;
  }
  return nullptr;
}

}  // namespace

Result<std::vector<size_t>> HostTopology::nearNics(const std::vector<NicCandidate>& nics,
                                                   const std::string& cpuList) const {
  hwloc_topology_t topology = impl_->topology;
  Bitmap cpus;
  if (!cpuList.empty()) {
    if (hwloc_bitmap_list_sscanf(cpus.raw, cpuList.c_str()) != 0)
      return makeError(Code::kInvalidArgument, "'%s' is not a CPU list such as 0-3,8",
                       cpuList.c_str());
  } else if (hwloc_get_cpubind(topology, cpus.raw, HWLOC_CPUBIND_PROCESS) != 0 ||
             hwloc_bitmap_iszero(cpus.raw)) {
    hwloc_bitmap_copy(cpus.raw, hwloc_topology_get_topology_cpuset(topology));
  }
  std::vector<size_t> near;
  for (size_t i = 0; i < nics.size(); ++i) {
    hwloc_obj_t device = findDevice(topology, nics[i]);
    hwloc_obj_t home = device ? hwloc_get_non_io_ancestor_obj(topology, device) : nullptr;
    if (!home || !home->cpuset || hwloc_bitmap_intersects(home->cpuset, cpus.raw))
      near.push_back(i);
  }
  if (near.empty())
    for (size_t i = 0; i < nics.size(); ++i) near.push_back(i);
  return near;
}

std::vector<Nic> HostTopology::listNics() const {
  hwloc_topology_t topology = impl_->topology;
  std::vector<Nic> fabrics, networks;
  for (hwloc_obj_t os = hwloc_get_next_osdev(topology, nullptr); os;
       os = hwloc_get_next_osdev(topology, os)) {
    if (!os->name || !os->attr) continue;
    const auto type = os->attr->osdev.type;
    if (type != HWLOC_OBJ_OSDEV_OPENFABRICS && type != HWLOC_OBJ_OSDEV_NETWORK) continue;
    Nic nic;
    nic.name = os->name;
    hwloc_obj_t home = hwloc_get_non_io_ancestor_obj(topology, os);
    if (home && home->nodeset && !hwloc_bitmap_iszero(home->nodeset) &&
        hwloc_bitmap_weight(home->nodeset) == 1)
      nic.numa = hwloc_bitmap_first(home->nodeset);
    (type == HWLOC_OBJ_OSDEV_OPENFABRICS ? fabrics : networks).push_back(nic);
  }
  return fabrics.empty() ? networks : fabrics;
}

}  // namespace trnccl::topology
