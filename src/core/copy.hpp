// Bulk copies for the engine and the transports. A copy into a user buffer that is larger than
// the caches would be read for ownership, line by line, before it is overwritten: for a large
// all-gather that is a third of the memory traffic. Streaming (non-temporal) stores skip that
// read and leave the caches to the data peers are about to read. Copies into shared windows
// and rings stay cached: a peer reads them next.
#pragma once

#include <cstddef>

namespace trnccl {

enum class CopyKind {
  kCached,     // memcpy
  kStreaming,  // non-temporal stores; the caller's later release store publishes the data
};

// dst and src must not overlap. kStreaming ends with a store fence, so a release store that
// follows (a progress counter, a ring index) orders after the data. An empty copy may pass the
// null pointers of empty buffers (memcpy itself may not).
void copyBytes(void* dst, const void* src, size_t bytes, CopyKind kind = CopyKind::kCached);

// TRNCCL_STREAM_COPY_BYTES counts the node's bytes (the last-level cache is shared, and every
// local rank of a collective copies about as much at once): the bytes one of localRanks ranks
// must copy into user buffers before its call streams. 0 stays 0 (never stream).
inline size_t streamCopyBytesPerRank(size_t nodeBytes, size_t localRanks) {
  if (nodeBytes == 0) return 0;
  const size_t perRank = nodeBytes / (localRanks ? localRanks : 1);
  return perRank ? perRank : 1;
}

// The address offset bytes into a buffer.
inline const char* byteAt(const void* p, size_t offset) {
  return static_cast<const char*>(p) + offset;
}
inline char* byteAt(void* p, size_t offset) {
  return static_cast<char*>(p) + offset;
}

// Name of the streaming-store variant this CPU uses ("avx2", "sse2", or "memcpy").
const char* streamingCopyIsa();

}  // namespace trnccl
