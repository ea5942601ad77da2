#include "core/copy.hpp"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace trnccl {
namespace {

#if defined(__x86_64__)
// Copies the unaligned head with memcpy so that every streaming store is aligned to its width.
template <size_t kAlign>
size_t alignHead(char*& dst, const char*& src, size_t& bytes) {
  size_t head = (kAlign - (reinterpret_cast<uintptr_t>(dst) & (kAlign - 1))) & (kAlign - 1);
  if (head > bytes) head = bytes;
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  return head;
}

__attribute__((target("avx2"))) void streamAvx2(char* dst, const char* src, size_t bytes) {
  alignHead<32>(dst, src, bytes);
  size_t i = 0;
  // Four stores per iteration: two cache lines, enough to keep the write-combining buffers full.
  for (; i + 128 <= bytes; i += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  for (; i + 32 <= bytes; i += 32)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
  std::memcpy(dst + i, src + i, bytes - i);
  _mm_sfence();
}

// A cached copy with vector loads and stores (bytes >= 128): the first 32 bytes unaligned, then
// aligned stores; the last 128 bytes are copied from the end and may rewrite bytes the loop
// already wrote (with the same values, since the buffers do not overlap).
__attribute__((target("avx2"))) void cachedAvx2(char* dst, const char* src, size_t bytes) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
  size_t i = 32 - (reinterpret_cast<uintptr_t>(dst) & 31);
  for (; i + 128 <= bytes; i += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  const char* srcEnd = src + bytes;
  char* dstEnd = dst + bytes;
  __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(srcEnd - 128));
  __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(srcEnd - 96));
  __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(srcEnd - 64));
  __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(srcEnd - 32));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dstEnd - 128), a);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dstEnd - 96), b);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dstEnd - 64), c);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dstEnd - 32), d);
}

void streamSse2(char* dst, const char* src, size_t bytes) {
  alignHead<16>(dst, src, bytes);
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  for (; i + 16 <= bytes; i += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  std::memcpy(dst + i, src + i, bytes - i);
  _mm_sfence();
}

bool hasAvx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return yes;
}
#endif

// Below this a streaming copy saves too little to pay for its fence and alignment head.
constexpr size_t kMinStreamingBytes = 4096;

// glibc 2.36's memcpy moves 2 KiB and more with `rep movsb` (up to about the L2 size). On CPUs
// with fast short rep movsb that instruction crawls when the destination lies a few bytes past
// the source modulo a page: measured on an AMD EPYC VM, a 64 KiB copy took 21-22 us with the
// destination 1-31 bytes past the source (mod 4096) against 1.3-1.4 us at every other distance,
// 256 KiB 134 us against 6-9 us (glibc bug 30994 describes the same). That distance is the
// common case here: malloc returns large blocks 16 bytes past a page boundary and the shared
// windows are page-aligned, so every copy out of a window into such a buffer hit it (2-rank
// broadcast 256 KiB: 99 us instead of 26). Those copies take a vector loop instead.
constexpr size_t kRepMovsbMinBytes = 2048;
bool repMovsbCrawls(const void* dst, const void* src, size_t bytes) {
  const uintptr_t distance =
      (reinterpret_cast<uintptr_t>(dst) - reinterpret_cast<uintptr_t>(src)) & 4095;
  return bytes >= kRepMovsbMinBytes && distance != 0 && distance < 32;
}

}  // namespace

void copyBytes(void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return;
#if defined(__x86_64__)
  if (kind == CopyKind::kStreaming && bytes >= kMinStreamingBytes) {
    if (hasAvx2())
      streamAvx2(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
    else
      streamSse2(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
    return;
  }
  if (repMovsbCrawls(dst, src, bytes) && hasAvx2()) {
    cachedAvx2(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

const char* streamingCopyIsa() {
#if defined(__x86_64__)
  return hasAvx2() ? "avx2" : "sse2";
#else
  return "memcpy";
#endif
}

}  // namespace trnccl
