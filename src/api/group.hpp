// Per-thread group state between trncclGroupStart and trncclGroupEnd.
#pragma once

#include "api/handles.hpp"
#include "collectives/algorithm.hpp"

namespace trnccl::api {

bool groupActive();
// Queues a call until GroupEnd.
void groupAdd(trncclComm_t comm, CollArgs&& args);

}  // namespace trnccl::api
