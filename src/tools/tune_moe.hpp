// trnccl-tune --moe (tune_moe.cpp): the MoE engine's mode per batch size, measured on this
// job's ranks and written as tuning entries.
#pragma once

namespace trnccl::tools {

// Runs on every rank of the job trnccl-run or mpirun started; argv as trnccl-tune got it.
// Returns the process's exit code.
int tuneMoe(int argc, char** argv);

}  // namespace trnccl::tools
