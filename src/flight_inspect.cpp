#include "flight_inspect.hpp"

#include <dirent.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "core/strformat.hpp"
#include "core/text_file.hpp"

namespace trnccl {

namespace {

std::string rankList(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    // runs of consecutive ranks as a-b
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) text += ", ";
    text += j > i + 1
                ? strformat("%d-%d", ranks[i], ranks[j])
                : (j == i + 1 ? strformat("%d, %d", ranks[i], ranks[j]) : std::to_string(ranks[i]));
    i = j;
  }
  return text;
}

const FlightDump::Call* findCall(const FlightDump& d, uint64_t seq) {
  for (const auto& c : d.calls)
    if (c.seq == seq) return &c;
  return nullptr;
}

bool finished(const FlightDump::Call& c) {
  return c.state == "done";
}

// The call a rank stands in: its first call not done (nullptr: all done).
const FlightDump::Call* currentCall(const FlightDump& d) {
  for (const auto& c : d.calls)
    if (!finished(c)) return &c;
  return nullptr;
}

uint64_t lastSeq(const FlightDump& d) {
  return d.calls.empty() ? 0 : d.calls.back().seq;
}

// Where a rank stands, without anything that differs only by rank (so that ranks in the same
// state share one line, whatever the job's size).
std::string standing(const FlightDump& d) {
  const FlightDump::Call* c = currentCall(d);
  if (!c) {
    if (d.calls.empty()) return "no calls recorded";
    const auto& last = d.calls.back();
    return strformat("all calls done; last #%llu %s", static_cast<unsigned long long>(last.seq),
                     last.call.c_str());
  }
  std::string line = strformat("#%llu %s %s", static_cast<unsigned long long>(c->seq),
                               c->call.c_str(), c->state.c_str());
  if (c->waitingFor >= 0)
    line += strformat(", %s rank %d", c->blockedOn.empty() ? "waiting for" : c->blockedOn.c_str(),
                      c->waitingFor);
  const size_t queued = static_cast<size_t>(lastSeq(d) - c->seq);
  if (queued > 0) line += strformat(" (%zu more queued behind it)", queued);
  return line;
}

std::string inspectOne(const std::vector<const FlightDump*>& dumps) {
  std::ostringstream out;
  const FlightDump& any = *dumps.front();
  const int nranks = any.header.nranks;
  std::map<int, const FlightDump*> byRank;
  for (const FlightDump* d : dumps) byRank[d->header.rank] = d;
  std::vector<int> present, missing;
  for (int r = 0; r < nranks; ++r) (byRank.count(r) ? present : missing).push_back(r);
  out << strformat("communicator '%s' (key %s), %d ranks: files from %s\n", any.header.comm.c_str(),
                   any.header.commKey.c_str(), nranks, rankList(present).c_str());

  std::vector<std::string> verdicts;
  // 1. Mismatched calls: the first position where ranks called different things.
  std::set<uint64_t> seqs;
  for (const auto& [r, d] : byRank)
    for (const auto& c : d->calls) seqs.insert(c.seq);
  for (uint64_t seq : seqs) {
    std::map<std::string, std::vector<int>> bySignature;
    std::map<std::string, std::string> example;
    for (const auto& [r, d] : byRank) {
      if (const FlightDump::Call* c = findCall(*d, seq)) {
        bySignature[c->signature].push_back(r);
        example[c->signature] = c->call;
      }
    }
    if (bySignature.size() < 2) continue;
    // Groups in the order of their lowest rank.
    std::vector<std::pair<std::vector<int>, std::string>> groups;
    for (const auto& [sig, ranks] : bySignature) groups.push_back({ranks, example[sig]});
    std::sort(groups.begin(), groups.end());
    std::string text = strformat("MISMATCH at call #%llu:", static_cast<unsigned long long>(seq));
    for (size_t g = 0; g < groups.size(); ++g)
      text += strformat("%s %s called %s", g == 0 ? "" : ";", rankList(groups[g].first).c_str(),
                        groups[g].second.c_str());
    verdicts.push_back(text);
    break;
  }
  // 2. Ranks that left no file: dead, or without TRNCCL_FLIGHT_RECORDER_DIR.
  if (!missing.empty())
    verdicts.push_back(
        strformat("%s left no flight recorder file: %s died, or ran without "
                  "TRNCCL_FLIGHT_RECORDER_DIR",
                  rankList(missing).c_str(), missing.size() == 1 ? "it" : "they"));
  // 3. Behind: ranks whose last call is older than the call others stand in.
  uint64_t stuckAt = 0;
  for (const auto& [r, d] : byRank)
    if (const FlightDump::Call* c = currentCall(*d)) stuckAt = std::max(stuckAt, c->seq);
  std::vector<int> behind;
  for (const auto& [r, d] : byRank)
    if (stuckAt > 0 && lastSeq(*d) < stuckAt) behind.push_back(r);
  if (!behind.empty()) {
    const FlightDump::Call* waitedIn = nullptr;
    for (const auto& [r, d] : byRank)
      if (const FlightDump::Call* c = findCall(*d, stuckAt)) waitedIn = c;
    verdicts.push_back(strformat(
        "%s BEHIND: never called #%llu %s%s", rankList(behind).c_str(),
        static_cast<unsigned long long>(stuckAt), waitedIn ? waitedIn->call.c_str() : "",
        behind.size() == 1 ? strformat(" (its last call is #%llu)",
                                       static_cast<unsigned long long>(lastSeq(*byRank[behind[0]])))
                                 .c_str()
                           : ""));
  }
  // 4. Whom the others wait for.
  std::map<int, std::vector<int>> waitersOf;
  for (const auto& [r, d] : byRank)
    if (const FlightDump::Call* c = currentCall(*d); c && c->waitingFor >= 0 && c->waitingFor != r)
      waitersOf[c->waitingFor].push_back(r);
  if (!waitersOf.empty()) {
    auto most = std::max_element(
        waitersOf.begin(), waitersOf.end(),
        [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
    verdicts.push_back(strformat("%s wait%s for rank %d", rankList(most->second).c_str(),
                                 most->second.size() == 1 ? "s" : "", most->first));
  }
  if (verdicts.empty()) verdicts.push_back("no rank is stuck: every recorded call finished");
  out << "VERDICT: " << verdicts.front() << "\n";
  for (size_t i = 1; i < verdicts.size(); ++i) out << "  also: " << verdicts[i] << "\n";
  // Ranks in the same state share a line; then the first failure's own words (a failure
  // that names another rank's as its cause is not the first), and where each named rank ran.
  std::map<std::string, std::vector<int>> byStanding;
  for (const auto& [r, d] : byRank) byStanding[standing(*d)].push_back(r);
  std::vector<std::pair<std::vector<int>, std::string>> lines;
  for (const auto& [text, ranks] : byStanding) lines.push_back({ranks, text});
  std::sort(lines.begin(), lines.end());
  for (const auto& [ranks, text] : lines) out << "  " << rankList(ranks) << ": " << text << "\n";
  const FlightDump* origin = nullptr;
  for (const auto& [r, d] : byRank) {
    const std::string& why = d->header.reason;
    if (why.empty() || why.find("stopped because rank") != std::string::npos) continue;
    if (!origin || (origin->header.reason.find("trncclCommAbort") != std::string::npos &&
                    why.find("trncclCommAbort") == std::string::npos))
      origin = d;
  }
  if (origin)
    out << strformat("  first failure (rank %d, pid %d on %s): %s\n", origin->header.rank,
                     origin->header.pid, origin->header.host.c_str(),
                     origin->header.reason.c_str());
  for (int r : behind)
    out << strformat("  rank %d ran as pid %d on %s\n", r, byRank[r]->header.pid,
                     byRank[r]->header.host.c_str());
  return out.str();
}

}  // namespace

Result<std::vector<FlightDump>> readFlightDumps(const std::string& dir,
                                                std::vector<std::string>* notes) {
  DIR* d = opendir(dir.c_str());
  if (!d)
    return makeError(Code::kInvalidArgument, "cannot read directory %s: %s", dir.c_str(),
                     std::strerror(errno));
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("trnccl-fr-", 0) == 0 && name.size() > 4 &&
        name.compare(name.size() - 4, 4, ".txt") == 0)
      names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  std::vector<FlightDump> dumps;
  for (const auto& name : names) {
    auto text = readTextFile(dir + "/" + name);
    if (!text.isOk()) {
      notes->push_back(name + ": " + text.status().message());
      continue;
    }
    auto dump = parseFlightDump(text.value());
    if (!dump.isOk()) {
      notes->push_back(name + ": " + dump.status().message());
      continue;
    }
    dumps.push_back(std::move(dump.value()));
  }
  return dumps;
}

std::string inspectFlightDumps(const std::vector<FlightDump>& dumps) {
  if (dumps.empty()) return "no flight recorder files\n";
  std::map<std::string, std::vector<const FlightDump*>> byComm;
  for (const auto& d : dumps) byComm[d.header.commKey].push_back(&d);
  std::string out;
  for (const auto& [key, group] : byComm) {
    if (!out.empty()) out += "\n";
    out += inspectOne(group);
  }
  return out;
}

}  // namespace trnccl
