#include "worker/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/file_io.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

// A control or /proc file's text; empty where it cannot be read (no such
// group, no cgroup v2).
std::string Slurp(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path, size_t{16} << 20);
  return text.ok() ? *std::move(text) : std::string();
}

// Control files are written in place: the kernel acts on the write itself.
absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) return absl::UnavailableError(absl::StrCat("cannot open ", path));
  out << text;
  out.flush();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("mkdir ", path, ": ", std::strerror(errno)));
}

// Names of the subdirectories of `dir`.
std::vector<std::string> SubDirs(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (lstat((dir + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      out.push_back(name);
    }
  }
  closedir(d);
  return out;
}

std::vector<pid_t> ReadPids(const std::string& group) {
  std::vector<pid_t> pids;
  for (absl::string_view line :
       absl::StrSplit(Slurp(group + "/cgroup.procs"), '\n', absl::SkipEmpty())) {
    int pid = 0;
    if (absl::SimpleAtoi(line, &pid)) pids.push_back(pid);
  }
  return pids;
}

// Kills everything in `group` and below, then removes the directories
// (deepest first). Returns the number of processes found.
int EmptyAndRemove(const std::string& group) {
  int found = 0;
  for (const std::string& sub : SubDirs(group))
    found += EmptyAndRemove(group + "/" + sub);
  std::vector<pid_t> pids = ReadPids(group);
  found += static_cast<int>(pids.size());
  if (!pids.empty() && !WriteFile(group + "/cgroup.kill", "1").ok()) {
    // Kernels before 5.14 have no cgroup.kill.
    for (pid_t pid : pids) kill(pid, SIGKILL);
  }
  // Killed processes leave the group once they are gone.
  const absl::Time until = absl::Now() + absl::Seconds(2);
  while (rmdir(group.c_str()) != 0 && errno == EBUSY && absl::Now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return found;
}

}  // namespace

int64_t OomKillsIn(const std::string& memory_events) {
  for (absl::string_view line : absl::StrSplit(memory_events, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> words =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    int64_t count = 0;
    if (words.size() == 2 && words[0] == "oom_kill" && absl::SimpleAtoi(words[1], &count))
      return count;
  }
  return 0;
}

std::optional<std::string> FindCgroup2Mount(const std::string& mountinfo) {
  for (absl::string_view line : absl::StrSplit(mountinfo, '\n', absl::SkipEmpty())) {
    // "<id> <parent> <maj:min> <root> <mount point> <opts> ... - <fstype> <source>
    // <opts>"
    std::vector<absl::string_view> halves = absl::StrSplit(line, " - ");
    if (halves.size() != 2) continue;
    std::vector<absl::string_view> tail = absl::StrSplit(halves[1], ' ');
    if (tail.empty() || tail[0] != "cgroup2") continue;
    std::vector<absl::string_view> head = absl::StrSplit(halves[0], ' ');
    if (head.size() < 5) continue;
    return std::string(head[4]);
  }
  return std::nullopt;
}

std::string OwnCgroupPath(const std::string& proc_self_cgroup) {
  for (absl::string_view line :
       absl::StrSplit(proc_self_cgroup, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "0::")) return std::string(line.substr(3));
  }
  return "/";
}

absl::StatusOr<std::unique_ptr<CgroupTree>> CgroupTree::Create(
    const std::string& worker_name) {
  std::optional<std::string> mount = FindCgroup2Mount(Slurp("/proc/self/mountinfo"));
  if (!mount) return absl::UnavailableError("no cgroup2 filesystem is mounted");
  std::string own = OwnCgroupPath(Slurp("/proc/self/cgroup"));
  if (own == "/") own.clear();
  if (Leftovers left = ReapLeftovers(*mount + own, worker_name); left.trees > 0) {
    spdlog::warn(
        "removed {} cgroup tree(s) left by an earlier worker {} that died without "
        "stopping its ranks; killed {} process(es) still in them",
        left.trees, worker_name, left.processes);
  }
  // The pid keeps two worker processes apart even when they share a name (two
  // clusters on one host, or tests): a group is only ever killed by its owner.
  std::string root = absl::StrCat(*mount, own, "/tessera-", worker_name, "-", getpid());
  absl::Status made = MakeDir(root);
  if (!made.ok()) return made;
  if (access((root + "/cgroup.procs").c_str(), W_OK) != 0) {
    return absl::UnavailableError(absl::StrCat(root, "/cgroup.procs is not writable"));
  }
  return CreateAt(root);
}

absl::StatusOr<std::unique_ptr<CgroupTree>> CgroupTree::CreateAt(
    const std::string& root) {
  if (access(root.c_str(), W_OK) != 0) {
    return absl::UnavailableError(absl::StrCat(root, " is not writable"));
  }
  return std::unique_ptr<CgroupTree>(new CgroupTree(root));
}

CgroupTree::Leftovers CgroupTree::ReapLeftovers(const std::string& parent,
                                                const std::string& worker_name) {
  Leftovers left;
  const std::string prefix = absl::StrCat("tessera-", worker_name, "-");
  for (const std::string& name : SubDirs(parent)) {
    if (!absl::StartsWith(name, prefix)) continue;
    int pid = 0;
    // All digits: "tessera-w1-2-77" belongs to worker "w1-2", not "w1".
    const absl::string_view digits = absl::string_view(name).substr(prefix.size());
    if (digits.empty() ||
        digits.find_first_not_of("0123456789") != absl::string_view::npos ||
        !absl::SimpleAtoi(digits, &pid) || pid <= 0 || pid == getpid()) {
      continue;
    }
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // its worker lives
    ++left.trees;
    left.processes += EmptyAndRemove(parent + "/" + name);
  }
  return left;
}

CgroupTree::~CgroupTree() { rmdir(root_.c_str()); }

absl::StatusOr<std::string> CgroupTree::EnsureGroup(int64_t job_id, int32_t attempt) {
  std::string group = absl::StrCat(root_, "/job-", job_id, "-attempt-", attempt);
  absl::Status made = MakeDir(group);
  if (!made.ok()) return made;
  return group;
}

bool CgroupTree::HasMemoryController() const {
  for (absl::string_view name :
       absl::StrSplit(Slurp(root_ + "/cgroup.controllers"), absl::ByAnyChar(" \n"),
                      absl::SkipEmpty())) {
    if (name == "memory") return true;
  }
  return false;
}

absl::StatusOr<std::string> CgroupTree::EnsureRankGroup(const std::string& attempt_group,
                                                        int32_t rank,
                                                        int64_t memory_max) {
  // Each level hands the controller to its children; a level that already
  // does accepts the write again.
  for (const std::string& parent : {root_, attempt_group}) {
    absl::Status enabled = WriteFile(parent + "/cgroup.subtree_control", "+memory");
    if (!enabled.ok()) return enabled;
  }
  const std::string group = absl::StrCat(attempt_group, "/rank-", rank);
  absl::Status made = MakeDir(group);
  if (!made.ok()) return made;
  absl::Status limited = WriteFile(group + "/memory.max", absl::StrCat(memory_max));
  if (!limited.ok()) return limited;
  // Both are optional: a kernel without swap accounting has no memory.swap.max.
  for (const auto& [file, value] :
       {std::pair<const char*, const char*>{"memory.swap.max", "0"},
        {"memory.oom.group", "1"}}) {
    const std::string path = absl::StrCat(group, "/", file);
    if (access(path.c_str(), F_OK) == 0) (void)WriteFile(path, value);
  }
  return group;
}

int64_t CgroupTree::OomKills(const std::string& group) const {
  return OomKillsIn(Slurp(group + "/memory.events"));
}

absl::Status CgroupTree::Kill(const std::string& group) {
  return WriteFile(group + "/cgroup.kill", "1");
}

std::vector<pid_t> CgroupTree::Pids(const std::string& group) const {
  std::vector<pid_t> pids = ReadPids(group);
  for (const std::string& sub : SubDirs(group)) {
    for (pid_t pid : ReadPids(group + "/" + sub)) pids.push_back(pid);
  }
  return pids;
}

absl::Status CgroupTree::Remove(const std::string& group) {
  for (const std::string& sub : SubDirs(group)) {
    const std::string path = group + "/" + sub;
    if (rmdir(path.c_str()) != 0 && errno == EBUSY) {
      return absl::FailedPreconditionError(absl::StrCat(path, " still has processes"));
    }
  }
  if (rmdir(group.c_str()) == 0 || errno == ENOENT) return absl::OkStatus();
  if (errno == EBUSY) {
    return absl::FailedPreconditionError(absl::StrCat(group, " still has processes"));
  }
  return absl::InternalError(absl::StrCat("rmdir ", group, ": ", std::strerror(errno)));
}

}  // namespace tessera
