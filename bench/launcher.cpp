// trnccl-run: starts N local rank processes of a program, the way mpirun does for MPI jobs.
// It creates the unique id (the rendezvous root runs in this process), hands it to every rank
// through TRNCCL_UNIQUE_ID / TRNCCL_RANK / TRNCCL_NRANKS, and makes sure the job ends: when a
// rank fails, the others get SIGTERM (then SIGKILL) instead of waiting forever.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "core/env.hpp"
#include "transports/efa/fabric.hpp"
#include "trnccl.h"

extern char** environ;

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: trnccl-run -np N [--hostids A,B,...] [--nranks TOTAL --first-rank K\n"
               "                  --id-file PATH] [--] PROGRAM [ARGS...]\n"
               "  Starts N ranks of PROGRAM on this machine with TRNCCL_RANK, TRNCCL_NRANKS and\n"
               "  TRNCCL_UNIQUE_ID set. --hostids gives rank i the TRNCCL_HOSTID A, B, ...\n"
               "  (cycled), to emulate several nodes. Exits non-zero if any rank fails.\n"
               "  FI_TCP_IFACE and FI_NET_IFACE default to lo (libfabric's socket providers stay\n"
               "  on loopback).\n"
               "  One job from several launchers (e.g. one per network namespace): each starts\n"
               "  ranks K..K+N-1 of TOTAL; the one with --first-rank 0 creates the unique id\n"
               "  and writes it to PATH (its root listens on TRNCCL_BOOTSTRAP_ADDR), the others\n"
               "  wait up to 60 s for PATH and join with it.\n"
               "  For torch.distributed's env:// rendezvous it also sets RANK, WORLD_SIZE,\n"
               "  LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR (127.0.0.1) and MASTER_PORT (a free\n"
               "  port) where they are not set, so trnccl-run -np 2 python3 train.py works\n"
               "  with init_process_group(\"trnccl\") as under torchrun.\n");
}

volatile sig_atomic_t interrupted = 0;
void onSignal(int) {
  interrupted = 1;
}

// A TCP port on 127.0.0.1 that nothing listens on now (for torch's store), or 0.
int freeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

}  // namespace

// Waits for the creating launcher's id file (written whole, then renamed into place).
bool readIdFile(const std::string& path, std::string* hex) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (FILE* f = std::fopen(path.c_str(), "r")) {
      char buffer[512] = {};
      size_t n = std::fread(buffer, 1, sizeof(buffer) - 1, f);
      std::fclose(f);
      *hex = std::string(buffer, n);
      while (!hex->empty() && (hex->back() == '\n' || hex->back() == ' ')) hex->pop_back();
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

int main(int argc, char** argv) {
  int nranks = 0;  // ranks this launcher starts
  int totalRanks = 0, firstRank = 0;
  std::string idFile;
  std::vector<std::string> hostIds;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if ((arg == "-np" || arg == "-n") && i + 1 < argc) {
      nranks = std::atoi(argv[++i]);
    } else if (arg == "--nranks" && i + 1 < argc) {
      totalRanks = std::atoi(argv[++i]);
    } else if (arg == "--first-rank" && i + 1 < argc) {
      firstRank = std::atoi(argv[++i]);
    } else if (arg == "--id-file" && i + 1 < argc) {
      idFile = argv[++i];
    } else if (arg == "--hostids" && i + 1 < argc) {
      std::string list = argv[++i];
      size_t start = 0;
      while (start <= list.size()) {
        size_t comma = list.find(',', start);
        hostIds.push_back(list.substr(start, comma == std::string::npos ? comma : comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    } else if (arg == "--") {
      ++i;
      break;
    } else {
      break;
    }
  }
  if (totalRanks == 0) totalRanks = nranks;
  if (nranks <= 0 || i >= argc || firstRank < 0 || firstRank + nranks > totalRanks ||
      (totalRanks != nranks && idFile.empty())) {
    usage(stderr);
    return 2;
  }
  std::string idHex;
  if (firstRank == 0) {
    trncclUniqueId id;
    if (trncclGetUniqueId(&id) != trncclSuccess) {
      std::fprintf(stderr, "trnccl-run: %s\n", trncclGetLastError(nullptr));
      return 1;
    }
    idHex = trnccl::bootstrap::uniqueIdToHex(id);
    if (!idFile.empty()) {
      std::string partial = idFile + ".partial";
      FILE* f = std::fopen(partial.c_str(), "w");
      if (!f || std::fprintf(f, "%s\n", idHex.c_str()) < 0 || std::fclose(f) != 0 ||
          std::rename(partial.c_str(), idFile.c_str()) != 0) {
        std::fprintf(stderr, "trnccl-run: cannot write %s: %s\n", idFile.c_str(),
                     std::strerror(errno));
        return 1;
      }
    }
  } else if (!readIdFile(idFile, &idHex)) {
    std::fprintf(stderr,
                 "trnccl-run: %s did not appear within 60 s (start the launcher with "
                 "--first-rank 0 first)\n",
                 idFile.c_str());
    return 1;
  }
  signal(SIGINT, onSignal);
  signal(SIGTERM, onSignal);

  // torch.distributed's env:// variables, for a job started by this launcher alone (a job
  // spread over several launchers sets its own MASTER_ADDR / MASTER_PORT).
  const bool torchEnv = firstRank == 0 && nranks == totalRanks;
  const int torchPort = torchEnv && !std::getenv("MASTER_PORT") ? freeLoopbackPort() : 0;

  std::vector<pid_t> pids;
  for (int local = 0; local < nranks; ++local) {
    const int rank = firstRank + local;
    // Build the environment before fork: only exec may run in the child.
    std::vector<std::string> env;
    auto isOurs = [&hostIds](const char* entry) {
      for (const char* name : {trnccl::env::kRank.name, trnccl::env::kNranks.name,
                               trnccl::env::kUniqueId.name, trnccl::env::kHostId.name}) {
        size_t len = std::strlen(name);
        bool replaced = name != trnccl::env::kHostId.name || !hostIds.empty();
        if (replaced && std::strncmp(entry, name, len) == 0 && entry[len] == '=') return true;
      }
      return false;
    };
    for (char** e = environ; *e; ++e)
      if (!isOurs(*e)) env.emplace_back(*e);
    env.push_back(std::string(trnccl::env::kRank.name) + "=" + std::to_string(rank));
    env.push_back(std::string(trnccl::env::kNranks.name) + "=" + std::to_string(totalRanks));
    env.push_back(std::string(trnccl::env::kUniqueId.name) + "=" + idHex);
    // Every rank of this launcher is on this machine: libfabric's socket providers stay on
    // the loopback interface unless the user pinned them elsewhere.
    for (const char* pin : trnccl::efa::kSocketInterfaceVariables)
      if (!std::getenv(pin)) env.push_back(std::string(pin) + "=lo");
    if (!hostIds.empty())
      env.push_back(std::string(trnccl::env::kHostId.name) + "=" + hostIds[rank % hostIds.size()]);
    if (torchEnv) {
      auto setIfUnset = [&env](const char* name, const std::string& value) {
        if (!std::getenv(name)) env.push_back(std::string(name) + "=" + value);
      };
      setIfUnset("RANK", std::to_string(rank));
      setIfUnset("WORLD_SIZE", std::to_string(totalRanks));
      setIfUnset("LOCAL_RANK", std::to_string(local));
      setIfUnset("LOCAL_WORLD_SIZE", std::to_string(nranks));
      setIfUnset("MASTER_ADDR", "127.0.0.1");
      if (torchPort > 0) setIfUnset("MASTER_PORT", std::to_string(torchPort));
    }
    std::vector<char*> envp;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      execvpe(argv[i], argv + i, envp.data());
      std::fprintf(stderr, "trnccl-run: cannot run %s: %s\n", argv[i], std::strerror(errno));
      _exit(127);
    }
    pids.push_back(pid);
  }

  int failures = 0, firstBad = -1, remaining = nranks;
  std::vector<bool> done(nranks, false);
  auto stopAt = std::chrono::steady_clock::time_point::max();
  bool termSent = false, killSent = false;
  while (remaining > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < nranks; ++r) {
        if (pids[r] != pid) continue;
        done[r] = true;
        --remaining;
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok) {
          ++failures;
          if (firstBad < 0) firstBad = r;
          if (WIFSIGNALED(status))
            std::fprintf(stderr, "trnccl-run: rank %d (pid %d) died of signal %d\n", firstRank + r,
                         pid, WTERMSIG(status));
          else
            std::fprintf(stderr, "trnccl-run: rank %d (pid %d) exited with %d\n", firstRank + r,
                         pid, WEXITSTATUS(status));
          // The survivors will error out on their own (they notice the dead peer); give them
          // a moment to say so, then stop them.
          if (stopAt == std::chrono::steady_clock::time_point::max())
            stopAt = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        }
      }
      continue;
    }
    if (interrupted && stopAt == std::chrono::steady_clock::time_point::max())
      stopAt = std::chrono::steady_clock::now();
    auto now = std::chrono::steady_clock::now();
    if (now >= stopAt && !termSent) {
      for (int r = 0; r < nranks; ++r)
        if (!done[r]) kill(pids[r], SIGTERM);
      termSent = true;
    }
    if (termSent && !killSent && now >= stopAt + std::chrono::seconds(5)) {
      for (int r = 0; r < nranks; ++r)
        if (!done[r]) kill(pids[r], SIGKILL);
      killSent = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (failures) {
    std::fprintf(stderr, "trnccl-run: %d of %d ranks failed (first: rank %d)\n", failures, nranks,
                 firstRank + firstBad);
    return 1;
  }
  return interrupted ? 130 : 0;
}
