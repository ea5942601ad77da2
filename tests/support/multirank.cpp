#include "support/multirank.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <thread>

namespace trnccl::testing {
namespace {

bool writeAll(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool readAll(int fd, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::read(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

void Failures::add(const char* fmt, ...) {
  ++count_;
  if (count_ > 20) return;  // the first failures say enough
  char line[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof(line), fmt, args);
  va_end(args);
  text_ += line;
  text_ += "\n";
}

std::vector<RankOutcome> runRanks(int nranks, const RankBody& body, double timeoutSeconds,
                                  int ranksToStart) {
  if (ranksToStart < 0) ranksToStart = nranks;
  std::vector<RankOutcome> outcomes(ranksToStart);
  std::vector<pid_t> pids(ranksToStart);
  std::vector<int> idPipes(ranksToStart), resultPipes(ranksToStart);
  std::fflush(nullptr);
  for (int r = 0; r < ranksToStart; ++r) {
    int idPipe[2], resultPipe[2];
    if (pipe(idPipe) != 0 || pipe(resultPipe) != 0) std::abort();
    pid_t pid = fork();
    if (pid == 0) {
      ::close(idPipe[1]);
      ::close(resultPipe[0]);
      for (int other = 0; other < r; ++other) {  // siblings' pipes are not ours
        ::close(idPipes[other]);
        ::close(resultPipes[other]);
      }
      trncclUniqueId id;
      std::string failures;
      if (!readAll(idPipe[0], &id, sizeof(id)))
        failures = "could not read the unique id";
      else
        failures = body(r, nranks, id);
      writeAll(resultPipe[1], failures.data(), failures.size());
      ::close(resultPipe[1]);
      std::fflush(nullptr);
      _exit(failures.empty() ? 0 : 1);
    }
    ::close(idPipe[0]);
    ::close(resultPipe[1]);
    pids[r] = pid;
    idPipes[r] = idPipe[1];
    resultPipes[r] = resultPipe[0];
  }
  // The rendezvous root starts only after every fork, so no child inherits its thread.
  trncclUniqueId id;
  if (trncclGetUniqueId(&id) != trncclSuccess) std::abort();
  for (int r = 0; r < ranksToStart; ++r) {
    writeAll(idPipes[r], &id, sizeof(id));
    ::close(idPipes[r]);
  }
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(timeoutSeconds * 1000));
  int open = ranksToStart;
  std::vector<bool> closed(ranksToStart, false);
  while (open > 0) {
    std::vector<pollfd> fds;
    std::vector<int> which;
    for (int r = 0; r < ranksToStart; ++r)
      if (!closed[r]) {
        fds.push_back({resultPipes[r], POLLIN, 0});
        which.push_back(r);
      }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) break;
    int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, 1000)));
    if (rc <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      char buffer[4096];
      ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        outcomes[which[i]].failures.append(buffer, n);
      } else if (n == 0 || errno != EINTR) {
        closed[which[i]] = true;
        --open;
      }
    }
  }
  for (int r = 0; r < ranksToStart; ++r) {
    outcomes[r].rank = r;
    if (!closed[r]) {
      outcomes[r].timedOut = true;
      ::kill(pids[r], SIGKILL);
    }
    ::close(resultPipes[r]);
    int status = 0;
    ::waitpid(pids[r], &status, 0);
    if (WIFEXITED(status)) outcomes[r].exitCode = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) outcomes[r].signal = WTERMSIG(status);
  }
  return outcomes;
}

std::string summarize(const std::vector<RankOutcome>& outcomes) {
  std::string text;
  for (const RankOutcome& o : outcomes) {
    if (o.exitCode == 0 && o.failures.empty() && !o.timedOut) continue;
    text += "rank " + std::to_string(o.rank);
    if (o.timedOut)
      text += " timed out (killed)";
    else if (o.signal)
      text += " died of signal " + std::to_string(o.signal);
    else
      text += " exited " + std::to_string(o.exitCode);
    if (!o.failures.empty()) text += ":\n" + o.failures;
    text += "\n";
  }
  return text;
}

}  // namespace trnccl::testing
