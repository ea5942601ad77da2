#include "support/sweep.hpp"

namespace trnccl::testing {

void expectSame(Failures& f, const std::string& what, const void* got, const void* want,
                size_t count, trncclDataType_t dtype) {
  size_t bad = firstMismatch(got, want, count, dtype);
  if (bad == static_cast<size_t>(-1)) return;
  f.add("%s: element %zu of %zu is %s, expected %s", what.c_str(), bad, count,
        elementText(got, bad, dtype).c_str(), elementText(want, bad, dtype).c_str());
}

std::string initComm(trncclComm_t* comm, int nranks, const trncclUniqueId& id, int rank) {
  trncclResult_t rc = trncclCommInitRank(comm, nranks, id, rank);
  if (rc == trncclSuccess) return "";
  return std::string("trncclCommInitRank failed: ") + trncclGetErrorString(rc) + ": " +
         trncclGetLastError(nullptr);
}

std::vector<RankOutcome> withComm(
    int n, const std::function<void(int rank)>& setup,
    const std::function<void(Failures&, trncclComm_t, int rank, int nranks)>& body) {
  return runRanks(n, [&](int rank, int nranks, const trncclUniqueId& id) {
    setup(rank);
    trncclComm_t comm = nullptr;
    std::string error = initComm(&comm, nranks, id, rank);
    if (!error.empty()) return error;
    Failures f;
    body(f, comm, rank, nranks);
    if (trncclCommDestroy(comm) != trncclSuccess) f.add("destroy failed");
    return f.text();
  });
}

uint64_t saltOf(int a, int b, size_t c) {
  return (static_cast<uint64_t>(a) << 48) ^ (static_cast<uint64_t>(b) << 40) ^ c;
}

}  // namespace trnccl::testing
