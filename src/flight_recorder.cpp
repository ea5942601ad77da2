#include "flight_recorder.hpp"

#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/dtype.hpp"
#include "core/strformat.hpp"

namespace trnccl {

namespace {

const char* stateName(FlightEntry::State state) {
  switch (state) {
    case FlightEntry::State::kQueued: return "queued";
    case FlightEntry::State::kStarted: return "running";
    case FlightEntry::State::kDone: return "done";
    case FlightEntry::State::kFailed: return "failed";
  }
  return "?";
}

bool reduces(CollKind kind) {
  return kind == CollKind::kAllReduce || kind == CollKind::kReduce ||
         kind == CollKind::kReduceScatter;
}

bool rooted(CollKind kind) {
  return kind == CollKind::kBroadcast || kind == CollKind::kReduce;
}

// "AllReduce(count=1024, float, sum)", as the library's messages name calls.
std::string describe(const FlightEntry& e) {
  if (!e.planned.empty()) return e.planned;
  if (e.kind == CollKind::kSendRecv) {
    std::string text = strformat("%s(count=%zu, %s, peer=%d)", e.isSend ? "Send" : "Recv", e.count,
                                 dtypeName(e.dtype), e.peer);
    if (e.calls > 1) text += strformat(" +%d more in its group", e.calls - 1);
    return text;
  }
  std::string text = strformat("%s(count=%zu, %s", collName(e.kind), e.count, dtypeName(e.dtype));
  if (reduces(e.kind)) text += strformat(", %s", redOpName(e.op));
  if (rooted(e.kind)) text += strformat(", root=%d", e.root);
  return text + ")";
}

// What every rank of the communicator must have called at this position: point-to-point
// calls differ by design (each names its own peer), all-to-all-v counts by rank.
std::string signature(const FlightEntry& e) {
  if (!e.planned.empty()) return collName(e.kind);
  if (e.kind == CollKind::kSendRecv) return "SendRecv";
  if (e.kind == CollKind::kAllToAllv) return strformat("AllToAllv(%s)", dtypeName(e.dtype));
  return describe(e);
}

std::string ageMs(int64_t now, int64_t then) {
  if (then == 0) return "-";
  return strformat("%.1f", (now - then) / 1e6);
}

}  // namespace

int64_t FlightRecorder::coarseNowNs() {
  // The coarse clock is a read of the kernel's last tick (no TSC read): cheap enough for every
  // call, and a resolution of a few milliseconds is plenty for telling where a job hangs.
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void FlightRecorder::configure(size_t entries) {
  ring_.assign(entries, FlightEntry{});
  next_ = 1;
}

uint64_t FlightRecorder::record(const CollArgs* calls, size_t ncalls, const char* algorithm) {
  if (ring_.empty()) return 0;
  const uint64_t seq = next_++;
  FlightEntry& e = ring_[seq % ring_.size()];
  const CollArgs& a = calls[0];
  e.seq = seq;
  e.kind = a.kind;
  e.count = a.count;
  e.dtype = a.dtype;
  e.op = a.op;
  e.root = a.root;
  e.peer = a.peer;
  e.isSend = a.isSend;
  e.calls = static_cast<int>(ncalls);
  e.algorithm = algorithm ? algorithm : "";
  e.planned.clear();
  e.state = FlightEntry::State::kQueued;
  e.stepsDone = e.stepsTotal = 0;
  e.waitingFor = -1;
  e.blockedOn = "";
  e.queuedNs = coarseNowNs();
  e.startedNs = e.endedNs = 0;
  return seq;
}

uint64_t FlightRecorder::recordPlanned(CollKind kind, const std::string& description) {
  if (ring_.empty()) return 0;
  CollArgs args;
  args.kind = kind;
  const uint64_t seq = record(&args, 1, "engine");
  ring_[seq % ring_.size()].planned = description;
  return seq;
}

FlightEntry* FlightRecorder::find(uint64_t seq) {
  if (seq == 0 || ring_.empty()) return nullptr;
  FlightEntry& e = ring_[seq % ring_.size()];
  return e.seq == seq ? &e : nullptr;
}

void FlightRecorder::started(uint64_t seq) {
  // No clock read here: when the call started matters only if it then waited, and the
  // progress engine times that itself (filled in by the dump: noteRunningLocked).
  if (FlightEntry* e = find(seq)) e->state = FlightEntry::State::kStarted;
}

void FlightRecorder::ended(uint64_t seq, bool ok) {
  if (FlightEntry* e = find(seq)) {
    e->state = ok ? FlightEntry::State::kDone : FlightEntry::State::kFailed;
    e->endedNs = coarseNowNs();
    if (ok) e->waitingFor = -1;
  }
}

std::string FlightRecorder::format(const Header& h) const {
  const int64_t now = coarseNowNs();
  std::ostringstream out;
  out << "# trnccl flight recorder 1\n";
  out << "rank\t" << h.rank << "\n";
  out << "nranks\t" << h.nranks << "\n";
  out << "comm\t" << h.comm << "\n";
  out << "comm_key\t" << h.commKey << "\n";
  out << "host\t" << h.host << "\n";
  out << "pid\t" << h.pid << "\n";
  out << "reason\t" << h.reason << "\n";
  out << "last_error\t" << h.lastError << "\n";
  out << "entries\t" << ring_.size() << "\n";
  // Oldest first: the slot after the newest call holds the oldest one still kept.
  const size_t n = ring_.size();
  for (size_t i = 0; i < n; ++i) {
    const FlightEntry& e = ring_[(next_ + i) % n];
    if (e.seq == 0) continue;
    std::string state = stateName(e.state);
    if (e.state == FlightEntry::State::kStarted && e.stepsTotal > 0)
      state += strformat(" step %u/%u", e.stepsDone, e.stepsTotal);
    out << "call\tseq=" << e.seq << "\tcall=" << describe(e) << "\tsignature=" << signature(e)
        << "\talgorithm=" << e.algorithm << "\tstate=" << state << "\twaiting_for=" << e.waitingFor
        << "\tblocked_on=" << e.blockedOn << "\tqueued_ms_ago=" << ageMs(now, e.queuedNs)
        << "\tstarted_ms_ago=" << ageMs(now, e.startedNs)
        << "\tended_ms_ago=" << ageMs(now, e.endedNs) << "\n";
  }
  return out.str();
}

Status FlightRecorder::dumpTo(const std::string& dir, const Header& h) const {
  const std::string path =
      strformat("%s/trnccl-fr-%s-rank%d.txt", dir.c_str(), h.commKey.c_str(), h.rank);
  const std::string partial = path + ".partial";
  const std::string text = format(h);
  FILE* f = std::fopen(partial.c_str(), "w");
  if (!f)
    return makeError(Code::kSystemError,
                     "cannot write the flight recorder to %s: %s (TRNCCL_FLIGHT_RECORDER_DIR)",
                     partial.c_str(), std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed || std::rename(partial.c_str(), path.c_str()) != 0)
    return makeError(Code::kSystemError, "cannot write the flight recorder to %s: %s", path.c_str(),
                     std::strerror(errno));
  return Status::ok();
}

namespace {

// "key=value" fields of a call line, split at tabs.
std::string field(const std::vector<std::string>& fields, const char* key) {
  const size_t len = std::strlen(key);
  for (const auto& f : fields)
    if (f.size() > len && f.compare(0, len, key) == 0 && f[len] == '=') return f.substr(len + 1);
  return "";
}

double msOrMinus(const std::string& text) {
  return text.empty() || text == "-" ? -1 : std::atof(text.c_str());
}

}  // namespace

Result<FlightDump> parseFlightDump(const std::string& text) {
  FlightDump dump;
  std::istringstream in(text);
  std::string line;
  int lineNo = 0;
  bool sawMagic = false;
  while (std::getline(in, line)) {
    ++lineNo;
    if (line.rfind("# trnccl flight recorder", 0) == 0) {
      sawMagic = true;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields;
    size_t start = 0;
    for (;;) {
      const size_t tab = line.find('\t', start);
      fields.push_back(line.substr(start, tab == std::string::npos ? tab : tab - start));
      if (tab == std::string::npos) break;
      start = tab + 1;
    }
    const std::string& key = fields[0];
    const std::string value = fields.size() > 1 ? fields[1] : "";
    auto& h = dump.header;
    if (key == "rank")
      h.rank = std::atoi(value.c_str());
    else if (key == "nranks")
      h.nranks = std::atoi(value.c_str());
    else if (key == "comm")
      h.comm = value;
    else if (key == "comm_key")
      h.commKey = value;
    else if (key == "host")
      h.host = value;
    else if (key == "pid")
      h.pid = std::atoi(value.c_str());
    else if (key == "reason")
      h.reason = value;
    else if (key == "last_error")
      h.lastError = value;
    else if (key == "entries")
      continue;
    else if (key == "call") {
      FlightDump::Call c;
      c.seq = std::strtoull(field(fields, "seq").c_str(), nullptr, 10);
      if (c.seq == 0)
        return makeError(Code::kInvalidArgument, "line %d: a call without seq=", lineNo);
      c.call = field(fields, "call");
      c.signature = field(fields, "signature");
      c.algorithm = field(fields, "algorithm");
      c.state = field(fields, "state");
      if (std::sscanf(c.state.c_str(), "running step %u/%u", &c.stepsDone, &c.stepsTotal) != 2)
        c.stepsDone = c.stepsTotal = 0;
      c.waitingFor = std::atoi(field(fields, "waiting_for").c_str());
      c.blockedOn = field(fields, "blocked_on");
      c.queuedMs = msOrMinus(field(fields, "queued_ms_ago"));
      c.startedMs = msOrMinus(field(fields, "started_ms_ago"));
      c.endedMs = msOrMinus(field(fields, "ended_ms_ago"));
      dump.calls.push_back(std::move(c));
    } else {
      return makeError(Code::kInvalidArgument, "line %d: unknown key '%s'", lineNo, key.c_str());
    }
  }
  if (!sawMagic)
    return makeError(Code::kInvalidArgument,
                     "not a trnccl flight recorder dump (no '# trnccl flight recorder' line)");
  return dump;
}

}  // namespace trnccl
