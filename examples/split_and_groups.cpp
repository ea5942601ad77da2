// The C++ wrapper: split the world into even and odd ranks, all-reduce inside each half, and
// exchange with ring neighbours in a group.
// Run it with: build/bench/trnccl-run -np 4 build/examples/split_and_groups
#include <cstdio>
#include <vector>

#include <trnccl/trnccl.hpp>

int main() {
  int rank = 0, nranks = 0;
  trncclUniqueId raw{};
  if (trncclGetLaunchInfo(&rank, &nranks, &raw) != trncclSuccess) {
    std::fprintf(stderr, "%s\n", trncclGetLastError(nullptr));
    return 2;
  }
  try {
    trnccl::Comm world(nranks, trnccl::UniqueId::fromRaw(raw), rank);
    trnccl::Comm half = world.split(rank % 2, rank);
    std::vector<int> value{rank};
    // Registration is optional; on EFA it spares per-call registration of a reused buffer.
    trnccl::Registration registered = half.registerBuffer(std::span<int>(value));
    half.allReduce(std::span<int>(value));
    registered.release();
    std::vector<int> toNext{rank}, fromPrev{-1};
    {
      trnccl::Group group;
      world.send(std::span<const int>(toNext), (rank + 1) % nranks);
      world.recv(std::span<int>(fromPrev), (rank + nranks - 1) % nranks);
      group.end();
    }
    std::printf("rank %d: sum over my half = %d, my left neighbour is %d\n", rank, value[0],
                fromPrev[0]);
  } catch (const trnccl::Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
  return 0;
}
