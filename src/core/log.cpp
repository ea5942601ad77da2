#include "core/log.hpp"

#include <unistd.h>

#include <sys/syscall.h>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "core/env.hpp"
#include "core/strformat.hpp"
#include "core/text_file.hpp"

namespace trnccl::log {
namespace {

struct Config {
  Level level = Level::kWarn;
  unsigned subsys = kAll;
  FILE* out = stderr;
  char host[64] = "?";
};

unsigned parseSubsys(std::string list) {
  bool exclude = !list.empty() && list[0] == '^';
  if (exclude) list.erase(0, 1);
  unsigned mask = 0;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string item = list.substr(start, comma == std::string::npos ? comma : comma - start);
    for (auto& c : item) c = static_cast<char>(toupper(c));
    if (item == "ALL")
      mask |= kAll;
    else if (item == "INIT")
      mask |= kInit;
    else if (item == "COLL")
      mask |= kColl;
    else if (item == "NET")
      mask |= kNet;
    else if (item == "SHM")
      mask |= kShm;
    else if (item == "TOPO")
      mask |= kTopo;
    else if (item == "BOOT")
      mask |= kBoot;
    else if (item == "MOE")
      mask |= kMoe;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return exclude ? ~mask : mask;
}

Config& config() {
  static Config cfg = [] {
    Config c;
    std::string level = env::getString(env::kDebug);
    for (auto& ch : level) ch = static_cast<char>(toupper(ch));
    if (level == "NONE")
      c.level = Level::kNone;
    else if (level == "INFO")
      c.level = Level::kInfo;
    else if (level == "TRACE")
      c.level = Level::kTrace;
    else
      c.level = Level::kWarn;
    c.subsys = parseSubsys(env::getString(env::kDebugSubsys));
    gethostname(c.host, sizeof(c.host) - 1);
    std::string path = env::getString(env::kDebugFile);
    if (!path.empty()) {
      const std::string expanded = expandPathPattern(path, c.host, getpid());
      if (FILE* f = std::fopen(expanded.c_str(), "a")) c.out = f;
    }
    return c;
  }();
  return cfg;
}

std::mutex& writeMutex() {
  static std::mutex m;
  return m;
}

}  // namespace

bool enabled(Level level, unsigned subsys) {
  const Config& c = config();
  return level <= c.level && (subsys & c.subsys) != 0;
}

void write(Level level, unsigned /*subsys*/, const char* fmt, ...) {
  const Config& c = config();
  va_list args;
  va_start(args, fmt);
  std::string message = vstrformat(fmt, args);
  va_end(args);
  const char* tag = level == Level::kWarn ? "WARN" : level == Level::kInfo ? "INFO" : "TRACE";
  std::lock_guard<std::mutex> lock(writeMutex());
  std::fprintf(c.out, "%s:%d:%ld trnccl %s %s\n", c.host, getpid(),
               static_cast<long>(syscall(SYS_gettid)), tag, message.c_str());
  std::fflush(c.out);
}

}  // namespace trnccl::log
