// What planning costs per call: the planner's choice, and building the whole schedule a
// collective runs (ring family, 8 and 64 ranks; small and chunked large messages). Every
// blocking call pays both, so they bound the software part of small-message latency.
#include <benchmark/benchmark.h>

#include <vector>

#include "collectives/planner.hpp"
#include "engine/schedule.hpp"

namespace {

using namespace trnccl;

CommView ringView(int nranks) {
  CommView view;
  view.rank = 1;
  view.nranks = nranks;
  view.allLocal = false;  // the ring family: no shared windows needed to build
  view.windowBytes = 256 << 10;
  view.oneShotMaxBytes = 16 << 10;
  view.llMaxBytes = 64;
  std::vector<int> order(nranks);
  for (int r = 0; r < nranks; ++r) order[r] = r;
  view.ring = RingGroup::of(order, view.rank);
  return view;
}

void BM_PlannerChoose(benchmark::State& state) {
  CommView view = ringView(8);
  view.allLocal = true;
  Planner planner(view, parseAlgoOverrides("").value());
  size_t bytes = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    auto algo = planner.choose(CollKind::kAllReduce, bytes);
    benchmark::DoNotOptimize(algo);
  }
}

void BM_BuildRingAllReduce(benchmark::State& state) {
  const int nranks = static_cast<int>(state.range(1));
  CommView view = ringView(nranks);
  Planner planner(view, parseAlgoOverrides("").value());
  const size_t count = static_cast<size_t>(state.range(0)) / 4;
  std::vector<float> send(count + 1), recv(count + 1);
  CollArgs args;
  args.kind = CollKind::kAllReduce;
  args.sendbuff = send.data();
  args.recvbuff = recv.data();
  args.count = count;
  args.dtype = trncclFloat32;
  Schedule schedule;
  WindowState windows;
  for (auto _ : state) {
    schedule.clear();  // pooled like the communicator's schedules: no allocation when warm
    ScheduleBuilder builder(schedule, &windows, 1);
    if (!planner.build(builder, args, Algorithm::kRing).isOk())
      return state.SkipWithError("build failed");
    benchmark::DoNotOptimize(schedule.steps.data());
  }
  state.counters["steps"] = static_cast<double>(schedule.steps.size());
}

}  // namespace

BENCHMARK(BM_PlannerChoose)->Arg(8)->Arg(1 << 20);
BENCHMARK(BM_BuildRingAllReduce)
    ->Args({8, 8})
    ->Args({64 << 10, 8})
    ->Args({64 << 20, 8})
    ->Args({8, 64})
    ->Args({64 << 20, 64});
BENCHMARK_MAIN();
