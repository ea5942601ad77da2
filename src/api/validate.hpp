// Argument checks for every call: each failure names the rank, the call and what was wrong.
#pragma once

#include "collectives/algorithm.hpp"
#include "core/status.hpp"

namespace trnccl::api {

// fn is the C function name used in messages ("trncclAllReduce").
Status validateCall(const char* fn, int rank, int nranks, const CollArgs& args);

}  // namespace trnccl::api
