#include "perf/launch.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "core/env.hpp"

namespace trnccl::bench {

static bool startedByMpirun() {
  // Open MPI's launcher sets these in every process it starts (not TRNCCL_* knobs).
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

bool isFirstProcess() {
  if (const char* mpiRank = std::getenv("OMPI_COMM_WORLD_RANK")) return std::atoi(mpiRank) == 0;
  if (!env::isSet(env::kRank)) return true;
  auto rank = env::getInt(env::kRank);
  return !rank.isOk() || rank.value() <= 0;
}

bool discoverLaunch(const std::string& tool, Launch* launch) {
  if (env::isSet(env::kUniqueId)) {  // started by trnccl-run
    if (trncclGetLaunchInfo(&launch->rank, &launch->nranks, &launch->id) != trncclSuccess) {
      std::fprintf(stderr, "%s: %s\n", tool.c_str(), trncclGetLastError(nullptr));
      return false;
    }
    return true;
  }
  if (!startedByMpirun()) {
    std::fprintf(stderr,
                 "%s: no rank information. Start it with `trnccl-run -np N %s ...`, or with "
                 "`mpirun -np N %s ...` (as root add --allow-run-as-root; keep MPI on loopback "
                 "with --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo)\n",
                 tool.c_str(), tool.c_str(), tool.c_str());
    return false;
  }
  MPI_Init(nullptr, nullptr);
  MPI_Comm_rank(MPI_COMM_WORLD, &launch->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &launch->nranks);
  int ok = 1;
  if (launch->rank == 0 && trncclGetUniqueId(&launch->id) != trncclSuccess) {
    std::fprintf(stderr, "%s: %s\n", tool.c_str(), trncclGetLastError(nullptr));
    ok = 0;
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!ok) {
    MPI_Finalize();
    return false;
  }
  MPI_Bcast(&launch->id, sizeof(launch->id), MPI_BYTE, 0, MPI_COMM_WORLD);
  launch->viaMpi = true;
  return true;
}

void settleMpi() {
  MPI_Barrier(MPI_COMM_WORLD);
}

void finishLaunch(const Launch& launch) {
  if (launch.viaMpi) MPI_Finalize();
}

}  // namespace trnccl::bench
