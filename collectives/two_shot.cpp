#include "collectives/two_shot.hpp"

#include "collectives/direct_rounds.hpp"

namespace trnccl {

void twoShotDirect(ScheduleBuilder& b, const CollArgs& a, const CommView& c, int copyOutRank) {
  const size_t esize = elementSize(a);
  const int n = c.nranks;
  const int avg = a.op == trncclAvg ? n : 0;
  const size_t perRound = c.windowBytes / esize;
  const size_t align = 64 / esize;  // segments start on cache lines
  auto roundLen = [&](size_t k) { return std::min(perRound, a.count - k * perRound); };
  auto segLen = [&](size_t len) { return ceilDiv(ceilDiv(len, n), align) * align; };
  auto segBegin = [&](size_t len, int q) { return std::min(len, q * segLen(len)); };
  auto segEnd = [&](size_t len, int q) { return std::min(len, (q + 1) * segLen(len)); };

  directRounds(
      b, a, ceilDiv(a.count, perRound), true,
      [&](int slot, size_t k) {
        b.copy(c.window(c.rank, slot), byteAt(a.sendbuff, k * perRound * esize),
               roundLen(k) * esize);
      },
      [&](int slot, size_t k) {
        size_t len = roundLen(k);
        size_t begin = segBegin(len, c.rank) * esize;
        b.reduce(
            c.window(c.rank, slot) + begin, n, [&](int q) { return c.window(q, slot) + begin; },
            segEnd(len, c.rank) - segBegin(len, c.rank), avg);
      },
      [&](int slot, size_t k) {
        if (copyOutRank >= 0 && c.rank != copyOutRank) return;
        size_t len = roundLen(k);
        for (int q = 0; q < n; ++q) {
          size_t begin = segBegin(len, q);
          b.copy(byteAt(a.recvbuff, (k * perRound + begin) * esize),
                 c.window(q, slot) + begin * esize, (segEnd(len, q) - begin) * esize);
        }
      });
}

}  // namespace trnccl
