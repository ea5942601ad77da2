// trnccl-tune's measurements (trnccl_tune.cpp writes the file). Each number of the cost model
// is timed through a collective the planner prices with it, on all of the job's ranks at once
// (so under the load of a real job: the same ranks on the same cores), and read back through
// the model: the figure is the value at which modeledUs, with that communicator's own shape,
// gives the slowest rank's measured time. Timing links alone between two otherwise idle ranks
// measured them faster than collectives see them, and the planner then chose worse than with
// its defaults (docs/PLANNER.md).
#pragma once

#include <string>
#include <vector>

#include "collectives/cost_model.hpp"
#include "trnccl.h"

namespace trnccl::tools {

struct TuneJob {
  int rank = 0, nranks = 0;
  trncclComm_t world = nullptr;
  int repeats = 5;  // timings per figure, of which the median counts
};

// One round of every measurement this job's layout allows, into *costs (figures it cannot
// measure keep their values), with a sentence per measurement for the file's comments.
// Every rank of the job must call it alike. *nodes: the job's nodes. False (with the error
// printed) when a call failed.
bool measureRound(const TuneJob& job, CostParams* costs, std::vector<std::string>* notes,
                  int* nodes);

}  // namespace trnccl::tools
