// The C++ wrapper: split the world into even and odd ranks, all-reduce inside each half, and
// exchange with ring neighbours in a group.
// Run it with: build/bench/trnccl-run -np 4 build/examples/split_and_groups
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <trnccl/trnccl.hpp>

int main() {
  const char* rankText = std::getenv("TRNCCL_RANK");
  const char* sizeText = std::getenv("TRNCCL_NRANKS");
  const char* idText = std::getenv("TRNCCL_UNIQUE_ID");
  if (!rankText || !sizeText || !idText) {
    std::fprintf(stderr, "start me with: trnccl-run -np N split_and_groups\n");
    return 2;
  }
  int rank = std::atoi(rankText), nranks = std::atoi(sizeText);
  trncclUniqueId raw{};
  for (int i = 0; i < TRNCCL_UNIQUE_ID_BYTES; ++i)
    raw.internal[i] = static_cast<char>(std::stoi(std::string(idText + 2 * i, 2), nullptr, 16));
  try {
    trnccl::Comm world(nranks, trnccl::UniqueId::fromRaw(raw), rank);
    trnccl::Comm half = world.split(rank % 2, rank);
    std::vector<int> value{rank};
    half.allReduce(std::span<int>(value));
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
