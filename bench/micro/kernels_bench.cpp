// Reduction kernels against memcpy. Bytes/s counts what a two-source reduction touches
// (2 reads + 1 write), so a kernel as fast as memory lands near 1.5x memcpy's figure (1 read +
// 1 write); compare at cache-resident sizes (64 KiB) and beyond the cache (64 MiB).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "core/copy.hpp"
#include "core/dtype.hpp"
#include "core/reduce.hpp"

namespace {

// Tensors from framework allocators (and trnccl's shared windows) start on 64-byte lines.
struct AlignedBuffer {
  explicit AlignedBuffer(size_t bytes)
      : data(static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64))) {
    std::memset(data, 0, bytes);
  }
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  char* data;
};

void BM_Memcpy(benchmark::State& state) {
  size_t bytes = static_cast<size_t>(state.range(0));
  AlignedBuffer src(bytes), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data, src.data, bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes * 2);
}

// A direct algorithm's copy-out: 256 KiB windows (hot in L2, as a peer just staged them)
// copied one after another into a large user buffer, with plain stores (memcpy) or streaming
// stores (core/copy.hpp, what calls past TRNCCL_STREAM_COPY_BYTES use).
void windowCopyBench(benchmark::State& state, trnccl::CopyKind kind) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t window = std::min<size_t>(bytes, 256 << 10);
  AlignedBuffer src(window), dst(bytes);
  for (auto _ : state) {
    for (size_t at = 0; at < bytes; at += window)
      trnccl::copyBytes(dst.data + at, src.data, std::min(window, bytes - at), kind);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes * 2);
}
void BM_WindowCopyCached(benchmark::State& state) {
  windowCopyBench(state, trnccl::CopyKind::kCached);
}
void BM_WindowCopyStreaming(benchmark::State& state) {
  windowCopyBench(state, trnccl::CopyKind::kStreaming);
}

// A copy out of a page-aligned window into a malloc'd buffer: the destination lies 16 bytes past
// the source modulo a page, the distance at which glibc's rep movsb crawls on some CPUs
// (core/copy.cpp). memcpy against copyBytes, which takes its own loop there.
template <bool kLibrary>
void shortPageDistanceCopy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  AlignedBuffer src(bytes + 4096), dst(bytes + 4096 + 16);
  char* from = src.data + (4096 - reinterpret_cast<uintptr_t>(src.data) % 4096) % 4096;
  char* to = dst.data + (4096 - reinterpret_cast<uintptr_t>(dst.data) % 4096) % 4096 + 16;
  for (auto _ : state) {
    if (kLibrary)
      trnccl::copyBytes(to, from, bytes);
    else
      std::memcpy(to, from, bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes * 2);
}
void BM_MemcpyPageDistance16(benchmark::State& state) {
  shortPageDistanceCopy<false>(state);
}
void BM_CopyBytesPageDistance16(benchmark::State& state) {
  shortPageDistanceCopy<true>(state);
}

// Out of place (out = a op b) by default. In place (a = a op b) the output's lines are already
// in the cache, which separates the kernel's speed from the read-for-ownership of a third
// buffer that an out-of-place store costs at L2-resident sizes.
void reduceBench(benchmark::State& state, trncclDataType_t dtype, trncclRedOp_t op,
                 bool inPlace = false, int nsrcs = 2) {
  size_t bytes = static_cast<size_t>(state.range(0));
  size_t count = bytes / trnccl::dtypeSize(dtype);
  std::deque<AlignedBuffer> inputs;  // emplace_back never moves them
  std::vector<const void*> srcs;
  for (int k = 0; k < nsrcs; ++k) srcs.push_back(inputs.emplace_back(bytes).data);
  AlignedBuffer out(bytes);
  trnccl::ReduceArgs args{dtype, op, inPlace ? inputs[0].data : out.data, srcs.data(), nsrcs,
                          count, 0};
  for (auto _ : state) {
    trnccl::reduce(args);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes * (nsrcs + 1));
  state.SetLabel(trnccl::reduceKernelIsa());
}

// The MoE combine's weighted sum of one slot (bf16 row times a weight, added to an fp32
// accumulator or rounded into a bf16 row): bytes read and written.
template <bool kRounded>
void scaleAddBench(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));  // of the bf16 row
  const size_t count = bytes / 2;
  AlignedBuffer row(bytes), acc(count * sizeof(float)), out(bytes);
  float* accumulator = reinterpret_cast<float*>(acc.data);
  trnccl::ScaleAddArgs args{
      trncclBfloat16, 0.25f, row.data, accumulator, kRounded ? out.data : nullptr,
      accumulator,    count};
  for (auto _ : state) {
    trnccl::scaleAdd(args);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(
      static_cast<int64_t>(state.iterations()) *
      (bytes + (count * sizeof(float)) + (kRounded ? bytes : count * sizeof(float))));
  state.SetLabel(trnccl::reduceKernelIsa());
}
void BM_ScaleAddBf16IntoFloats(benchmark::State& s) {
  scaleAddBench<false>(s);
}
void BM_ScaleAddBf16Rounded(benchmark::State& s) {
  scaleAddBench<true>(s);
}

void BM_ReduceFloatSum(benchmark::State& s) {
  reduceBench(s, trncclFloat32, trncclSum);
}
void BM_ReduceBf16Sum(benchmark::State& s) {
  reduceBench(s, trncclBfloat16, trncclSum);
}
void BM_ReduceFloatSumInPlace(benchmark::State& s) {
  reduceBench(s, trncclFloat32, trncclSum, true);
}
void BM_ReduceBf16SumInPlace(benchmark::State& s) {
  reduceBench(s, trncclBfloat16, trncclSum, true);
}
void BM_ReduceBf16Sum4Sources(benchmark::State& s) {
  reduceBench(s, trncclBfloat16, trncclSum, false, 4);
}
void BM_ReduceFp16Sum(benchmark::State& s) {
  reduceBench(s, trncclFloat16, trncclSum);
}
void BM_ReduceDoubleSum(benchmark::State& s) {
  reduceBench(s, trncclFloat64, trncclSum);
}
void BM_ReduceInt32Sum(benchmark::State& s) {
  reduceBench(s, trncclInt32, trncclSum);
}
void BM_ReduceFloatMax(benchmark::State& s) {
  reduceBench(s, trncclFloat32, trncclMax);
}
void BM_ReduceInt8Prod(benchmark::State& s) {
  reduceBench(s, trncclInt8, trncclProd);
}

}  // namespace

BENCHMARK(BM_Memcpy)->Arg(8 << 10)->Arg(64 << 10)->Arg(64 << 20);
BENCHMARK(BM_WindowCopyCached)->Arg(64 << 20);
BENCHMARK(BM_WindowCopyStreaming)->Arg(64 << 20);
BENCHMARK(BM_MemcpyPageDistance16)->Arg(64 << 10)->Arg(256 << 10);
BENCHMARK(BM_CopyBytesPageDistance16)->Arg(64 << 10)->Arg(256 << 10);
BENCHMARK(BM_ReduceFloatSum)->Arg(8 << 10)->Arg(64 << 10)->Arg(64 << 20);
BENCHMARK(BM_ReduceBf16Sum)->Arg(8 << 10)->Arg(64 << 10)->Arg(64 << 20);
BENCHMARK(BM_ReduceFloatSumInPlace)->Arg(8 << 10)->Arg(64 << 10);
BENCHMARK(BM_ReduceBf16SumInPlace)->Arg(8 << 10)->Arg(64 << 10);
BENCHMARK(BM_ReduceBf16Sum4Sources)->Arg(8 << 10)->Arg(64 << 10)->Arg(16 << 20);
BENCHMARK(BM_ScaleAddBf16IntoFloats)->Arg(4 << 10)->Arg(64 << 10);
BENCHMARK(BM_ScaleAddBf16Rounded)->Arg(4 << 10)->Arg(64 << 10);
BENCHMARK(BM_ReduceFp16Sum)->Arg(8 << 10)->Arg(64 << 10)->Arg(64 << 20);
BENCHMARK(BM_ReduceDoubleSum)->Arg(64 << 10);
BENCHMARK(BM_ReduceInt32Sum)->Arg(64 << 10);
BENCHMARK(BM_ReduceFloatMax)->Arg(64 << 10);
BENCHMARK(BM_ReduceInt8Prod)->Arg(64 << 10);
BENCHMARK_MAIN();
