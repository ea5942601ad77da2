// Cross-memory attach (process_vm_readv): a rank copies straight out of a local peer's user
// buffer, one copy where the staging windows take two. Usable when the kernel lets ranks of one
// node read each other (same user, no seccomp filter or Yama restriction in the way), which
// init finds out by reading every local peer's probe word (Communicator::setupCma).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.hpp"

namespace trnccl::shm {

// The word peers read to test CMA, and the value it holds.
constexpr uint64_t kCmaProbeValue = 0x74726e6363434d41ULL;  // "trnccCMA"
const uint64_t* cmaProbeWord();

// Lets any process of this user read this one where Yama's ptrace_scope is 1 (peers are
// siblings, not descendants); nothing where it is 0. Returns what it did, for the log.
std::string allowCmaReaders();

// Reads the peer's probe word: "" when CMA works towards it, else why not (errno's text).
std::string probeCma(pid_t pid, uint64_t probeAddress);

// How many times longer the kernel's copy (process_vm_readv of 1 MiB from this process
// itself) takes than memcpy of the same bytes, best of three each; 0 when it cannot tell.
// About a millisecond, the first time a process asks; later calls return that answer.
double kernelCopySlowdown();

// The largest block (exclusive) that CMA reads on this node: explicitMaxBytes when the user set
// TRNCCL_CMA_MAX_BYTES, else from kernelSlowdown (0: not timed) -- see cma.cpp for the rule.
uint64_t cmaMaxBytes(uint64_t explicitMaxBytes, double kernelSlowdown, uint64_t streamCopyBytes,
                     bool oversubscribed);

// The largest block for broadcast: none (every block through the windows) where init timed the
// kernel's copy at more than twice memcpy's time, else the node's band -- see cma.cpp.
uint64_t broadcastCmaMaxBytes(uint64_t cmaMaxBytes, uint64_t kernelCopyPermille);

// Copies bytes from remoteAddress in process pid into dst, however many calls it takes.
// peerRank names the peer in the error.
Status cmaRead(pid_t pid, int peerRank, void* dst, uint64_t remoteAddress, size_t bytes);
// Bytes this process has asked cmaRead for so far (reads of peers' memory that the kernel
// copies, as opposed to CPU copies through a mapping), for tests.
uint64_t cmaKernelReadBytes();

}  // namespace trnccl::shm
