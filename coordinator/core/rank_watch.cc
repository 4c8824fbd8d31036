#include "coordinator/core/rank_watch.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

constexpr char kCollective[] = "collective";
constexpr char kDevice[] = "device";
// The device-time phase that is communication not hidden behind compute.
constexpr char kDeviceComm[] = "comm";
// The phase of a rank that has finished training: it flushes its last
// metrics and reports its result, which may wait on a failing store.
constexpr char kDone[] = "done";

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Whether the rank waits on its peers: blocked in a collective, or its host
// blocked on its device while the device waits in a collective whose inputs
// are complete. A rank in "device" with no ready collective waits on its own
// device work, which is working.
bool WaitsOnPeers(const v1::RankProgress& p) {
  if (p.phase() == kCollective) return true;
  return p.phase() == kDevice && !p.collective().empty() && p.collective_ready();
}

// Where a rank's own work per step is measured: its host's phases, or its
// device's (GPU ranks), which keep a slow GPU's work apart from the waits of
// a host that runs ahead of it.
enum class WorkClock { kHost, kDevice };

bool HasDeviceTimes(const v1::RankProgress& p, int32_t min_steps) {
  return !p.device_phase_ms().empty() && p.device_window_steps() >= min_steps;
}

const google::protobuf::Map<std::string, double>& PhaseTimes(const v1::RankProgress& p,
                                                             WorkClock clock) {
  return clock == WorkClock::kDevice ? p.device_phase_ms() : p.phase_ms();
}

// Whether time in `phase` is the rank's own work. On the host, neither waiting
// on peers nor waiting on its own device is: the latter is work, but measured
// by the device, not by the host.
bool IsOwnWork(const std::string& phase, WorkClock clock) {
  return clock == WorkClock::kDevice ? phase != kDeviceComm
                                     : phase != kCollective && phase != kDevice;
}

// Time per step spent on the rank's own work.
double OwnWorkMs(const v1::RankProgress& p, WorkClock clock) {
  double sum = 0;
  for (const auto& [phase, ms] : PhaseTimes(p, clock)) {
    if (IsOwnWork(phase, clock)) sum += ms;
  }
  return sum;
}

std::string Seconds(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Seconds(d), " s");
}

bool Moved(const v1::RankProgress& before, const v1::RankProgress& after) {
  return before.step() != after.step() || before.phase() != after.phase() ||
         before.phase_items() != after.phase_items() ||
         before.collective() != after.collective() ||
         before.collective_ready() != after.collective_ready();
}

// The phase of a rank's own work that accounts for most of its excess over
// its peers: its time per step there and the peers' median.
struct SlowPhase {
  std::string phase;
  double mine = 0;
  double theirs = 0;
};

SlowPhase FindSlowPhase(const v1::RankProgress& rank,
                        const std::vector<const v1::RankProgress*>& peers,
                        WorkClock clock) {
  SlowPhase slow;
  double excess = -1;
  for (const auto& [phase, ms] : PhaseTimes(rank, clock)) {
    if (!IsOwnWork(phase, clock)) continue;
    std::vector<double> peer_phase;
    for (const v1::RankProgress* peer : peers) {
      const auto& times = PhaseTimes(*peer, clock);
      auto it = times.find(phase);
      peer_phase.push_back(it == times.end() ? 0 : it->second);
    }
    const double m = Median(peer_phase);
    if (ms - m > excess) {
      excess = ms - m;
      slow = SlowPhase{phase, ms, m};
    }
  }
  return slow;
}

}  // namespace

RankWatchOptions RankWatchFor(const RankWatchOptions& defaults,
                              const v1::WatchdogSpec& spec) {
  RankWatchOptions o = defaults;
  if (spec.has_enabled()) o.enabled = spec.enabled();
  if (spec.rank_silent_after_s() > 0) {
    o.rank_silent_after = absl::Seconds(spec.rank_silent_after_s());
  }
  if (spec.stall_after_min_s() > 0) {
    o.stall_after_min = absl::Seconds(spec.stall_after_min_s());
  }
  if (spec.stall_step_factor() > 0) o.stall_step_factor = spec.stall_step_factor();
  if (spec.straggler_ratio() > 0) o.straggler_ratio = spec.straggler_ratio();
  if (spec.straggler_window_s() > 0) {
    o.straggler_window = absl::Seconds(spec.straggler_window_s());
  }
  return o;
}

RankWatch::RankWatch(std::vector<std::string> workers, absl::Time start)
    : workers_(std::move(workers)),
      start_(start),
      last_move_(start),
      ranks_(workers_.size()) {}

void RankWatch::Report(int32_t rank, const v1::RankProgress& progress, absl::Time now) {
  if (rank < 0 || rank >= static_cast<int32_t>(ranks_.size())) return;
  RankState& r = ranks_[rank];
  if (!r.reported || Moved(r.last, progress)) last_move_ = std::max(last_move_, now);
  r.reported = true;
  r.last = progress;
  r.received = now;
}

absl::Duration RankWatch::PhaseAge(const RankState& r, absl::Time now) const {
  return absl::Milliseconds(r.last.phase_elapsed_ms()) + (now - r.received);
}

std::string RankWatch::Name(int32_t rank) const {
  return absl::StrCat("rank ", rank, " on ", workers_[rank]);
}

std::string RankWatch::WaitingText(const std::vector<int32_t>& waiting,
                                   absl::Time now) const {
  // Group the waiting ranks by what they wait on.
  std::map<std::string, std::pair<std::vector<int32_t>, absl::Duration>> groups;
  for (int32_t r : waiting) {
    const RankState& s = ranks_[r];
    const std::string what =
        s.last.collective().empty() ? std::string("a collective") : s.last.collective();
    auto& [ranks, longest] = groups[what];
    ranks.push_back(r);
    longest = std::max(longest, PhaseAge(s, now));
  }
  std::string out;
  for (const auto& [what, group] : groups) {
    absl::StrAppend(&out, "; ", group.first.size() == 1 ? "rank " : "ranks ",
                    absl::StrJoin(group.first, ","), " waiting on ", what, " for ",
                    Seconds(group.second));
  }
  return out;
}

std::optional<WatchVerdict> RankWatch::Check(absl::Time now,
                                             const RankWatchOptions& options,
                                             const std::vector<bool>& running) const {
  if (!options.enabled) return std::nullopt;
  if (std::optional<WatchVerdict> v = CheckSilent(now, options, running)) return v;
  return CheckStalled(now, options, running);
}

std::optional<WatchVerdict> RankWatch::CheckSilent(
    absl::Time now, const RankWatchOptions& options,
    const std::vector<bool>& running) const {
  auto is_running = [&](size_t r) { return r < running.size() && running[r]; };
  // Unresponsive: silent past the threshold (counted from the start before
  // the first report).
  std::vector<int32_t> silent;
  std::vector<int32_t> waiting;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (!is_running(r)) continue;
    const RankState& s = ranks_[r];
    const absl::Time heard = s.reported ? std::max(s.received, start_) : start_;
    if (now - heard > options.rank_silent_after) {
      silent.push_back(static_cast<int32_t>(r));
    } else if (s.reported && WaitsOnPeers(s.last)) {
      waiting.push_back(static_cast<int32_t>(r));
    }
  }
  if (!silent.empty()) {
    WatchVerdict v{.kind = WatchVerdict::Kind::kUnresponsive, .culprits = silent};
    std::vector<std::string> parts;
    for (int32_t r : silent) {
      const RankState& s = ranks_[r];
      const absl::Time heard = s.reported ? std::max(s.received, start_) : start_;
      std::string last = s.reported ? absl::StrCat("last at step ", s.last.step(), " in ",
                                                   s.last.phase())
                                    : "none since the attempt started";
      parts.push_back(absl::StrCat(Name(r), " unresponsive: no progress report for ",
                                   Seconds(now - heard), " (", last, ")"));
    }
    v.reason = absl::StrCat(absl::StrJoin(parts, "; "), WaitingText(waiting, now));
    return v;
  }
  return std::nullopt;
}

std::optional<WatchVerdict> RankWatch::CheckStalled(
    absl::Time now, const RankWatchOptions& options,
    const std::vector<bool>& running) const {
  // A finished rank is never a stall: it waits on nothing of the attempt.
  auto is_running = [&](size_t r) {
    return r < running.size() && running[r] &&
           !(ranks_[r].reported && ranks_[r].last.phase() == kDone);
  };
  // Stalled: nothing moved for the threshold.
  std::vector<double> step_ms;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (is_running(r) && ranks_[r].reported && ranks_[r].last.step_time_ms() > 0) {
      step_ms.push_back(ranks_[r].last.step_time_ms());
    }
  }
  const absl::Duration threshold =
      std::max(options.stall_after_min,
               absl::Milliseconds(options.stall_step_factor * Median(step_ms)));
  if (now - last_move_ <= threshold) return std::nullopt;

  std::vector<int32_t> working;  // running, reported, not waiting on peers
  std::vector<int32_t> waiting;
  int64_t lowest = INT64_MAX;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (!is_running(r) || !ranks_[r].reported) continue;
    const RankState& s = ranks_[r];
    (WaitsOnPeers(s.last) ? waiting : working).push_back(static_cast<int32_t>(r));
    lowest = std::min(lowest, s.last.step());
  }
  if (working.empty() && waiting.empty()) return std::nullopt;
  WatchVerdict v{.kind = WatchVerdict::Kind::kStalled};
  if (!working.empty() && !waiting.empty()) {
    v.culprits = working;
  } else {
    // Everyone waits (a collective that never completes) or everyone works:
    // the ranks that fell behind are the suspects.
    const std::vector<int32_t>& all = working.empty() ? waiting : working;
    for (int32_t r : all) {
      if (ranks_[r].last.step() == lowest) v.culprits.push_back(r);
    }
  }
  std::vector<std::string> parts;
  for (int32_t r : v.culprits) {
    const RankState& s = ranks_[r];
    std::string phase = s.last.phase();
    if (phase == kCollective && !s.last.collective().empty()) {
      phase = absl::StrCat("collective ", s.last.collective());
    } else if (phase == kDevice && !s.last.collective().empty()) {
      phase = WaitsOnPeers(s.last)
                  ? absl::StrCat("device, waiting on ", s.last.collective())
                  : absl::StrCat("device (its inputs to ", s.last.collective(),
                                 " not ready)");
    }
    parts.push_back(absl::StrCat(Name(r), " stalled at step ", s.last.step(), " in ",
                                 phase, " for ", Seconds(PhaseAge(s, now))));
  }
  std::vector<int32_t> peers;
  for (int32_t r : waiting) {
    if (!std::binary_search(v.culprits.begin(), v.culprits.end(), r)) peers.push_back(r);
  }
  v.reason = absl::StrCat(absl::StrJoin(parts, "; "), WaitingText(peers, now),
                          " (no rank moved for ", Seconds(now - last_move_),
                          "; stall threshold ", Seconds(threshold), ")");
  return v;
}

std::vector<int32_t> RankWatch::ComparableRanks(const RankWatchOptions& options,
                                                const std::vector<bool>& running) const {
  std::vector<int32_t> comparable;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const RankState& s = ranks_[r];
    if (r < running.size() && running[r] && s.reported &&
        s.last.window_steps() >= options.straggler_min_steps && s.last.phase() != kDone) {
      comparable.push_back(static_cast<int32_t>(r));
    }
  }
  return comparable;
}

void RankWatch::UpdateEpisode(RankState& s, double ratio, absl::Time now,
                              const RankWatchOptions& options) {
  const double release = 1 + (options.straggler_ratio - 1) / 2;
  if (ratio > options.straggler_ratio) {
    if (s.slow_since == absl::InfiniteFuture()) s.slow_since = now;
  } else {
    s.slow_since = absl::InfiniteFuture();
  }
  // An episode ends only once the rank has stayed below the release ratio
  // for a whole window: a moment of catching up (its peers slowed by a
  // neighbour on a busy node) does not end it and start a new one.
  if (ratio < release) {
    if (s.fast_since == absl::InfiniteFuture()) s.fast_since = now;
    if (s.flagged && now - s.fast_since >= options.straggler_window) {
      s.flagged = false;
      s.text.clear();
    }
  } else {
    s.fast_since = absl::InfiniteFuture();
  }
}

std::vector<std::string> RankWatch::UpdateStragglers(absl::Time now,
                                                     const RankWatchOptions& options,
                                                     const std::vector<bool>& running) {
  std::vector<std::string> flagged;
  // Ranks whose report covers enough steps to compare.
  const std::vector<int32_t> comparable = ComparableRanks(options, running);
  // Like with like: device times only when every rank compared has them.
  WorkClock clock = comparable.empty() ? WorkClock::kHost : WorkClock::kDevice;
  for (int32_t r : comparable) {
    if (!HasDeviceTimes(ranks_[r].last, options.straggler_min_steps)) {
      clock = WorkClock::kHost;
    }
  }
  for (size_t r = 0; r < ranks_.size(); ++r) {
    RankState& s = ranks_[r];
    const bool usable = std::find(comparable.begin(), comparable.end(),
                                  static_cast<int32_t>(r)) != comparable.end();
    std::vector<const v1::RankProgress*> peers;
    std::vector<double> peer_own;
    for (int32_t p : comparable) {
      if (p != static_cast<int32_t>(r)) {
        peers.push_back(&ranks_[p].last);
        peer_own.push_back(OwnWorkMs(ranks_[p].last, clock));
      }
    }
    if (!usable || peer_own.empty()) {
      s.slow_since = absl::InfiniteFuture();
      s.flagged = false;
      s.text.clear();
      continue;
    }
    const double median = Median(peer_own);
    const double own = OwnWorkMs(s.last, clock);
    const double ratio = median > 0 ? own / median : 0;
    UpdateEpisode(s, ratio, now, options);
    if (s.slow_since == absl::InfiniteFuture() && !s.flagged) continue;
    const SlowPhase slow = FindSlowPhase(s.last, peers, clock);
    const std::string text = absl::StrFormat(
        "%s: %.1fx the median step work of its peers (%s %.0f ms vs %.0f ms per step%s)",
        Name(static_cast<int32_t>(r)), ratio, slow.phase, slow.mine, slow.theirs,
        clock == WorkClock::kDevice ? " on the device" : "");
    if (s.flagged) {
      s.text = text;
    } else if (now - s.slow_since >= options.straggler_window) {
      s.flagged = true;
      s.text = text;
      flagged.push_back(text);
    }
  }
  return flagged;
}

std::vector<std::string> RankWatch::Stragglers() const {
  std::vector<std::string> out;
  for (const RankState& s : ranks_) {
    if (s.flagged) out.push_back(s.text);
  }
  return out;
}

bool RankWatch::IsStraggler(int32_t rank) const {
  return rank >= 0 && rank < static_cast<int32_t>(ranks_.size()) && ranks_[rank].flagged;
}

const v1::RankProgress* RankWatch::Progress(int32_t rank) const {
  if (rank < 0 || rank >= static_cast<int32_t>(ranks_.size()) || !ranks_[rank].reported) {
    return nullptr;
  }
  return &ranks_[rank].last;
}

absl::Time RankWatch::ReceivedAt(int32_t rank) const {
  if (rank < 0 || rank >= static_cast<int32_t>(ranks_.size())) {
    return absl::InfinitePast();
  }
  return ranks_[rank].received;
}

int64_t RankWatch::MaxStep() const {
  int64_t m = 0;
  for (const RankState& s : ranks_) {
    if (s.reported) m = std::max(m, s.last.step());
  }
  return m;
}

}  // namespace tessera
