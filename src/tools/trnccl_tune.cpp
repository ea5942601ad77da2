// trnccl-tune: measures the cost model's numbers on this machine with real collectives and
// writes a tuning file (docs/PLANNER.md) for TRNCCL_TUNING_FILE. Run it on the job's layout:
//   trnccl-run -np 4 trnccl-tune -o host.tuning
// Every figure is timed through a collective on all the job's ranks at once and read back
// through the model (tune_links.hpp); the whole set is measured in several rounds and the file
// takes each figure's median over them, since this kind of machine changes speed from one
// minute to the next.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "collectives/cost_model.hpp"
#include "core/strformat.hpp"
#include "core/text_file.hpp"
#include "tools/tune_links.hpp"
#include "tools/tune_moe.hpp"
#include "trnccl.h"

using namespace trnccl;

namespace {

const char* kUsage =
    "usage: trnccl-run -np N trnccl-tune [-o FILE] [--rounds R] [--quick]\n"
    "\n"
    "Measures this machine's cost-model figures with real collectives on all N ranks at once\n"
    "(run it with the ranks per node and nodes of the jobs it is for): per link class (shm,\n"
    "neuronlink emulated over shm, efa over the libfabric provider trnccl picks, between the\n"
    "job's nodes or two emulated ones) latency and bandwidth from ring all-gathers; the direct\n"
    "protocol's synchronisation and the host's copy and reduction speeds from direct barriers,\n"
    "all-gathers and reduce-scatters. Each figure is the value at which the planner's model\n"
    "gives the measured time; the file holds each one's median over R rounds. It is a tuning\n"
    "file (docs/PLANNER.md) that TRNCCL_TUNING_FILE and trnccl-topo --tuning read. A class\n"
    "that cannot be set up here keeps its default and the file says so.\n"
    "  -o FILE      where rank 0 writes the file (default: standard output)\n"
    "  --rounds R   rounds of measurements (default 3)\n"
    "  --quick      one round of fewer repetitions (a smoke test; the numbers are noisier)\n"
    "  --moe        instead, the MoE engine's mode per batch size (see trnccl-tune --moe --help)\n"
    "libfabric's tcp provider must stay on loopback: set FI_TCP_IFACE=lo (and FI_NET_IFACE=lo).\n";

using Field = std::function<double&(CostParams&)>;

// The figures a round measures.
std::vector<Field> measuredFields() {
  using topology::LinkClass;
  std::vector<Field> fields = {
      [](CostParams& c) -> double& { return c.stepUs; },
      [](CostParams& c) -> double& { return c.syncUs; },
      [](CostParams& c) -> double& { return c.copyGBps; },
      [](CostParams& c) -> double& { return c.reduceGBps; },
  };
  for (LinkClass link : {LinkClass::kShm, LinkClass::kNeuronLink, LinkClass::kEfa}) {
    fields.push_back([link](CostParams& c) -> double& { return c.of(link).alphaUs; });
    fields.push_back([link](CostParams& c) -> double& { return c.of(link).gbps; });
  }
  return fields;
}

// Per figure, the median over the rounds.
CostParams medianOf(std::vector<CostParams> rounds) {
  CostParams result = rounds.front();
  for (const Field& field : measuredFields()) {
    std::vector<double> values;
    for (CostParams& round : rounds) values.push_back(field(round));
    std::sort(values.begin(), values.end());
    field(result) = values[values.size() / 2];
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--moe") == 0) return tools::tuneMoe(argc, argv);
  std::string output;
  tools::TuneJob job;
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::printf("%s", kUsage);
      return 0;
    } else if (arg == "-o" && i + 1 < argc) {
      output = argv[++i];
    } else if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
      if (rounds < 1 || rounds > 100) {
        std::fprintf(stderr, "trnccl-tune: --rounds takes 1-100, not '%s'\n", argv[i]);
        return 2;
      }
    } else if (arg == "--quick") {
      job.repeats = 3;
      rounds = 1;
    } else {
      std::fprintf(stderr, "trnccl-tune: unknown argument '%s'\n%s", arg.c_str(), kUsage);
      return 2;
    }
  }
  trncclUniqueId id;
  if (trncclGetLaunchInfo(&job.rank, &job.nranks, &id) != trncclSuccess) {
    std::fprintf(stderr, "trnccl-tune: %s\n%s", trncclGetLastError(nullptr), kUsage);
    return 2;
  }
  if (job.nranks < 2) {
    std::fprintf(stderr, "trnccl-tune: run it on 2 or more ranks (trnccl-run -np N), not %d\n",
                 job.nranks);
    return 2;
  }
  if (trncclCommInitRank(&job.world, job.nranks, id, job.rank) != trncclSuccess) {
    std::fprintf(stderr, "trnccl-tune rank %d: init: %s\n", job.rank, trncclGetLastError(nullptr));
    return 1;
  }
  int nodes = 1;
  std::vector<CostParams> measured;
  std::vector<std::string> notes;
  for (int round = 1; round <= rounds; ++round) {
    CostParams costs = machineCosts();
    std::vector<std::string> roundNotes;
    if (!tools::measureRound(job, &costs, &roundNotes, &nodes)) {
      trncclCommDestroy(job.world);
      return 1;
    }
    measured.push_back(costs);
    for (const std::string& note : roundNotes)
      notes.push_back(strformat("round %d, %s", round, note.c_str()));
  }
  trncclCommDestroy(job.world);
  if (job.rank != 0) return 0;  // rank 0 writes what its node and the probes it joined measured
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::string text = tuningText(medianOf(measured));
  std::string header = strformat(
      "# measured by trnccl-tune on %s, %s (%d ranks on %d node(s); each figure the "
      "median of %d round(s); slice_us: the default, not measured)\n",
      host, date, job.nranks, nodes, rounds);
  for (const std::string& note : notes) header += "# " + note + "\n";
  // The header line must come first; comments go after it.
  const size_t firstLine = text.find('\n') + 1;
  text = text.substr(0, firstLine) + header + text.substr(firstLine);
  if (output.empty()) {
    std::printf("%s", text.c_str());
    return 0;
  }
  if (Status written = writeTextFile(output, text); !written.isOk()) {
    std::fprintf(stderr, "trnccl-tune: %s\n", written.message().c_str());
    return 1;
  }
  std::printf("trnccl-tune: wrote %s\n%s", output.c_str(), text.c_str());
  return 0;
}
