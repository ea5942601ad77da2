// Runs a test body as N real rank processes on this machine (fork), the way gloo's fixture
// runs threads-as-ranks, but with process isolation: a crash or hang in one rank is a test
// failure with that rank named, never a hung test binary.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "trnccl.h"

namespace trnccl::testing {

struct RankOutcome {
  int rank = 0;
  int exitCode = -1;  // -1 when killed by a signal
  int signal = 0;
  bool timedOut = false;
  std::string failures;  // what the body reported
};

// body runs in each child with its rank and the shared unique id, and returns "" on success
// or a description of what went wrong. ranksToStart < nranks leaves the rest missing.
using RankBody = std::function<std::string(int rank, int nranks, const trncclUniqueId& id)>;

std::vector<RankOutcome> runRanks(int nranks, const RankBody& body, double timeoutSeconds = 300,
                                  int ranksToStart = -1);

// "" when every rank exited 0 with no failures, else one line per bad rank.
std::string summarize(const std::vector<RankOutcome>& outcomes);

// Collects failure lines inside a rank body.
class Failures {
 public:
  __attribute__((format(printf, 2, 3))) void add(const char* fmt, ...);
  bool empty() const { return text_.empty(); }
  const std::string& text() const { return text_; }
  size_t count() const { return count_; }

 private:
  std::string text_;
  size_t count_ = 0;
};

}  // namespace trnccl::testing

#define EXPECT_ALL_RANKS_OK(outcomes) EXPECT_EQ(::trnccl::testing::summarize(outcomes), "")
