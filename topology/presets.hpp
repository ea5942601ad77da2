// Named machine descriptions for TRNCCL_TOPO_PRESET (facts and assumptions in presets.cpp).
#pragma once

#include <string>
#include <vector>

#include "topology/device_graph.hpp"

namespace trnccl::topology {

const std::vector<std::string>& presetNames();
Result<DeviceGraph> preset(const std::string& name);

}  // namespace trnccl::topology
