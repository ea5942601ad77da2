// trnccl-info: what this build and this machine look like to trnccl, and every TRNCCL_*
// variable with its default, current value and meaning.
#include <cstdio>
#include <cstring>

#include "core/env.hpp"
#include "core/reduce.hpp"
#include "topology/host.hpp"
#include "trnccl.h"

int main(int argc, char** argv) {
  bool envOnly = argc > 1 && !std::strcmp(argv[1], "--env");
  if (argc > 1 && !envOnly) {
    std::printf(
        "usage: trnccl-info [--env]\n  Prints the library version, the reduction "
        "kernels chosen for this CPU, this host's identity and every TRNCCL_* variable."
        "\n  --env prints only the variables.\n");
    return std::strcmp(argv[1], "--help") && std::strcmp(argv[1], "-h") ? 2 : 0;
  }
  if (!envOnly) {
    int version = 0;
    trncclGetVersion(&version);
    auto host = trnccl::topology::localHostIdentity();
    std::printf(
        "trnccl %d.%d.%d\nreduction kernels: %s\nhost: %s (identity '%s', hash "
        "%016llx)\ntransports built in: self, neuronlink (emulated over shared memory), shm, "
        "efa\n\n",
        version / 10000, version / 100 % 100, version % 100, trnccl::reduceKernelIsa(),
        host.name.c_str(), host.id.c_str(), static_cast<unsigned long long>(host.hash));
  }
  std::printf("%s", trnccl::env::describeAll().c_str());
  return 0;
}
