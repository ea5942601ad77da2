// sendrecv_perf: nccl-tests compatible ring exchange (send to rank+1, receive from rank-1 in
// one group) benchmark (see perf/harness.hpp). No in-place form: the send would race the
// receive into the same buffer.
#include "perf/check_data.hpp"
#include "perf/harness.hpp"

namespace {

using trnccl::bench::PerfCall;

trncclResult_t run(const PerfCall& c, const void* send, void* recv) {
  trncclGroupStart();
  trncclSend(send, c.count, c.dtype, (c.rank + 1) % c.nranks, c.comm);
  trncclRecv(recv, c.count, c.dtype, (c.rank + c.nranks - 1) % c.nranks, c.comm);
  return trncclGroupEnd();
}

// Groups are blocking; the non-blocking form of a ring exchange is two requests.
trncclResult_t runAsync(const PerfCall& c, const void* send, void* recv, trncclRequest_t* request) {
  trncclRequest_t sent = nullptr;
  trncclResult_t rc =
      trncclSendAsync(send, c.count, c.dtype, (c.rank + 1) % c.nranks, c.comm, &sent);
  if (rc != trncclSuccess) return rc;
  rc = trncclRecvAsync(recv, c.count, c.dtype, (c.rank + c.nranks - 1) % c.nranks, c.comm, request);
  trncclResult_t sendResult = trncclWait(&sent, TRNCCL_TIMEOUT_DEFAULT);
  return rc != trncclSuccess ? rc : sendResult;
}

int runMpi(const PerfCall& c, const void* send, void* recv, MPI_Datatype type, MPI_Op) {
  int count = static_cast<int>(c.count);
  return MPI_Sendrecv(send, count, type, (c.rank + 1) % c.nranks, 0, recv, count, type,
                      (c.rank + c.nranks - 1) % c.nranks, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

void expected(const PerfCall& c, std::vector<char>& send, std::vector<char>& want) {
  trnccl::bench::fillRank(c.dtype, trncclSum, c.rank, c.count, send.data());
  want.resize(send.size());
  trnccl::bench::fillRank(c.dtype, trncclSum, (c.rank + c.nranks - 1) % c.nranks, c.count,
                          want.data());
}

}  // namespace

int main(int argc, char** argv) {
  static const trnccl::bench::PerfCollective sendRecv = {"sendrecv",
                                                         false,
                                                         false,
                                                         trnccl::bench::wholeBufferShape,
                                                         trnccl::bench::busFactorOne,
                                                         run,
                                                         runAsync,
                                                         nullptr,
                                                         expected,
                                                         runMpi};
  return trnccl::bench::perfMain(argc, argv, sendRecv);
}
