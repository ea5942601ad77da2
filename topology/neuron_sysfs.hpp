// The Neuron driver's sysfs tree: one directory per chip (neuron0, neuron1, ...) under
// /sys/devices/virtual/neuron_device, with `connected_devices` (the chips it has NeuronLinks
// to, "12, 3, 4, 1"), `core_count` and info/architecture/{device_name,instance_type}.
#pragma once

#include <string>

#include "topology/device_graph.hpp"

namespace trnccl::topology {

// The chips and links under `root`; an empty graph when the root does not exist or holds no
// neuronN directory (no driver: a host-only machine). A file that is there but unreadable as
// the driver writes it is an error naming the file.
Result<DeviceGraph> readNeuronSysfs(const std::string& root);

}  // namespace trnccl::topology
