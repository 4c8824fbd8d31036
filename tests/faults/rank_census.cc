#include "tests/faults/rank_census.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tessera::faults {
namespace {

// The value of "--name=VALUE" in `args`, if present and a number.
template <typename T>
bool FlagValue(const std::vector<std::string>& args, absl::string_view name, T* value) {
  const std::string prefix = absl::StrCat("--", name, "=");
  for (const std::string& a : args) {
    absl::string_view v = a;
    if (absl::ConsumePrefix(&v, prefix)) return absl::SimpleAtoi(v, value);
  }
  return false;
}

// Reads a small /proc file whole with plain system calls: FindTrainers reads
// one per process many times a second.
std::string ReadProcFile(const std::string& path) {
  std::string out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[8192];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

bool IsZombie(const std::string& proc_dir) {
  const std::string stat = ReadProcFile(proc_dir + "/stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ||
         stat[paren + 2] == 'Z' || stat[paren + 2] == 'X';
}

}  // namespace

std::vector<TrainerProcess> FindTrainers(const NetnsCluster& net,
                                         const std::string& coordinator) {
  const std::string coordinator_flag = "--coordinator=" + coordinator;
  std::vector<TrainerProcess> found;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return found;
  while (const dirent* entry = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    const std::string dir = absl::StrCat("/proc/", pid);
    const std::string cmdline = ReadProcFile(dir + "/cmdline");
    if (!absl::StrContains(cmdline, coordinator_flag)) continue;
    std::vector<std::string> args = absl::StrSplit(cmdline, '\0', absl::SkipEmpty());
    if (std::find(args.begin(), args.end(), coordinator_flag) == args.end()) continue;
    TrainerProcess p;
    p.pid = pid;
    if (!FlagValue(args, "job-id", &p.job_id) ||
        !FlagValue(args, "attempt", &p.attempt) || !FlagValue(args, "rank", &p.rank)) {
      continue;  // a worker or coordinator, not a trainer
    }
    if (IsZombie(dir)) continue;
    p.node = net.NodeOf(pid);
    // Gone between the scans: its namespace can no longer be read.
    if (p.node.empty() && access(dir.c_str(), F_OK) != 0) continue;
    found.push_back(std::move(p));
  }
  closedir(proc);
  return found;
}

RankSampler::RankSampler(const NetnsCluster* net, std::string coordinator,
                         absl::Duration period)
    : net_(net),
      coordinator_(std::move(coordinator)),
      period_(period),
      thread_([this] { Loop(); }) {}

RankSampler::~RankSampler() {
  stop_.Notify();
  thread_.join();
}

void RankSampler::Loop() {
  do {
    SampleOnce();
  } while (!stop_.WaitForNotificationWithTimeout(period_));
}

void RankSampler::SampleOnce() {
  std::vector<TrainerProcess> now = FindTrainers(*net_, coordinator_);
  const absl::Time at = absl::Now();
  std::map<std::pair<int64_t, int32_t>, std::vector<TrainerProcess>> by_rank;
  for (const TrainerProcess& p : now) by_rank[{p.job_id, p.rank}].push_back(p);
  absl::MutexLock lock(&mu_);
  ++samples_;
  for (const TrainerProcess& p : now) {
    auto [it, inserted] = sightings_.try_emplace(p.pid, Sighting{p, at, at});
    it->second.last_seen = at;
  }
  bool overlap = false;
  for (auto& [key, processes] : by_rank) {
    if (processes.size() < 2) continue;
    overlap = true;
    if (overlaps_.size() < kMaxOverlaps) overlaps_.push_back(Overlap{at, processes});
  }
  if (overlap) {
    ++overlap_samples_;
    if (last_sample_at_ != absl::InfinitePast()) overlap_time_ += at - last_sample_at_;
  }
  last_sample_at_ = at;
  latest_ = std::move(now);
}

std::map<pid_t, RankSampler::Sighting> RankSampler::Sightings() const {
  absl::MutexLock lock(&mu_);
  return sightings_;
}

std::vector<RankSampler::Overlap> RankSampler::Overlaps() const {
  absl::MutexLock lock(&mu_);
  return overlaps_;
}

int64_t RankSampler::overlap_samples() const {
  absl::MutexLock lock(&mu_);
  return overlap_samples_;
}

absl::Duration RankSampler::overlap_time() const {
  absl::MutexLock lock(&mu_);
  return overlap_time_;
}

int64_t RankSampler::samples() const {
  absl::MutexLock lock(&mu_);
  return samples_;
}

std::vector<TrainerProcess> RankSampler::Fresh(int64_t job_id) {
  absl::MutexLock lock(&mu_);
  // The sample under way may have started before this call: wait for the next.
  const int64_t after = samples_ + 1;
  auto done = [this, after]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return samples_ > after; };
  mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(10));
  std::vector<TrainerProcess> out;
  for (const TrainerProcess& p : latest_) {
    if (p.job_id == job_id) out.push_back(p);
  }
  return out;
}

}  // namespace tessera::faults
