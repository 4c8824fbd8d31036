#include "tests/faults/netns_cluster.h"

#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <iostream>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "tests/testing/test_util.h"

namespace tessera::faults {
namespace {

constexpr char kNetnsDir[] = "/var/run/netns";
constexpr char kNamePrefix[] = "tessera-";
constexpr char kHostLinkPrefix[] = "tsf";
constexpr char kMountPrefix[] = "tessera-faults-";

bool ProcessAlive(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

// The pid in "<prefix><pid>" or "<prefix><pid>-...", or 0.
pid_t PidInName(absl::string_view name, absl::string_view prefix) {
  if (!absl::ConsumePrefix(&name, prefix)) return 0;
  const size_t end = name.find('-');
  int pid = 0;
  if (!absl::SimpleAtoi(name.substr(0, end), &pid) || pid <= 0) return 0;
  return pid;
}

ino_t InodeOf(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return 0;
  return st.st_ino;
}

std::vector<pid_t> AllPids() {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    int pid = 0;
    if (absl::SimpleAtoi(entry.path().filename().string(), &pid)) pids.push_back(pid);
  }
  return pids;
}

// SIGKILLs every process whose network namespace is one of `inodes`, and waits
// (up to 10 s) until none is left.
void KillProcessesIn(const std::set<ino_t>& inodes) {
  if (inodes.empty()) return;
  const absl::Time until = absl::Now() + absl::Seconds(10);
  for (;;) {
    int left = 0;
    for (pid_t pid : AllPids()) {
      if (pid == getpid()) continue;
      if (inodes.contains(InodeOf(absl::StrCat("/proc/", pid, "/ns/net")))) {
        kill(pid, SIGKILL);
        ++left;
      }
    }
    if (left == 0 || absl::Now() > until) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

std::string FindProgram(const std::string& name) {
  const char* path = getenv("PATH");
  std::vector<std::string> dirs =
      absl::StrSplit(path != nullptr ? path : "", ':', absl::SkipEmpty());
  for (const char* d : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) dirs.push_back(d);
  for (const std::string& dir : dirs) {
    const std::string full = dir + "/" + name;
    if (access(full.c_str(), X_OK) == 0) return full;
  }
  return "";
}

absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv,
                                       const std::string& scratch_dir,
                                       absl::Duration timeout) {
  static std::atomic<int> counter{0};
  const std::string out =
      absl::StrCat(scratch_dir, "/command-", getpid(), "-", counter++, ".out");
  const std::string line = absl::StrJoin(argv, " ");
  absl::StatusOr<std::unique_ptr<testing::ChildProcess>> child =
      testing::ChildProcess::Start(argv, out);
  if (!child.ok()) return child.status();
  std::optional<int> status = (*child)->Wait(timeout);
  std::string output = testing::ReadFile(out);
  std::filesystem::remove(out);
  if (!status.has_value()) {
    return absl::DeadlineExceededError(
        absl::StrCat("`", line, "` still running after ", absl::FormatDuration(timeout)));
  }
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return absl::InternalError(
        absl::StrCat("`", line, "` failed (wait status ", *status, "): ", output));
  }
  return output;
}

absl::Status NetnsCluster::CheckSupported(const std::string& scratch_dir) {
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(
        "fault tests create network namespaces and mounts: they need root");
  }
  const std::string ip = FindProgram("ip");
  if (ip.empty()) {
    return absl::FailedPreconditionError(
        "fault tests need iproute2's `ip` (Debian package iproute2)");
  }
  const std::string probe = absl::StrCat(kNamePrefix, getpid(), "-probe");
  absl::StatusOr<std::string> added =
      RunCommand({ip, "netns", "add", probe}, scratch_dir);
  if (!added.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create a network namespace: ", added.status().message()));
  }
  absl::StatusOr<std::string> deleted =
      RunCommand({ip, "netns", "delete", probe}, scratch_dir);
  return deleted.ok() ? absl::OkStatus() : deleted.status();
}

NetnsCluster::NetnsCluster(std::string prefix, int subnet, std::string scratch_dir)
    : prefix_(std::move(prefix)),
      subnet_(subnet),
      scratch_dir_(std::move(scratch_dir)),
      ip_(FindProgram("ip")) {}

absl::StatusOr<std::unique_ptr<NetnsCluster>> NetnsCluster::Create(
    const std::vector<std::string>& nodes, const std::string& scratch_dir) {
  RemoveStaleFaultState(scratch_dir);
  const std::string ip = FindProgram("ip");
  absl::StatusOr<std::string> addrs = RunCommand({ip, "-4", "-o", "addr"}, scratch_dir);
  if (!addrs.ok()) return addrs.status();
  absl::StatusOr<std::string> routes = RunCommand({ip, "-4", "route"}, scratch_dir);
  if (!routes.ok()) return routes.status();
  // A subnet nothing on this host uses; concurrent runs start from different
  // places (their pids differ).
  int subnet = 0;
  for (int i = 0; i < 254 && subnet == 0; ++i) {
    const int n = static_cast<int>((getpid() + i) % 254) + 1;
    const std::string net = absl::StrCat("10.231.", n, ".");
    if (!absl::StrContains(*addrs, net) && !absl::StrContains(*routes, net)) subnet = n;
  }
  if (subnet == 0) return absl::ResourceExhaustedError("no free 10.231.<n>.0/24 subnet");
  std::unique_ptr<NetnsCluster> cluster(
      new NetnsCluster(absl::StrCat(kNamePrefix, getpid()), subnet, scratch_dir));
  absl::Status built = cluster->Build(nodes);
  if (!built.ok()) return built;  // the destructor removes what was made
  return cluster;
}

absl::Status NetnsCluster::Ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {ip_};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<std::string> out = RunCommand(argv, scratch_dir_);
  return out.ok() ? absl::OkStatus() : out.status();
}

absl::Status NetnsCluster::Build(const std::vector<std::string>& nodes) {
  const std::string bridge = prefix_ + "-br";
  RETURN_IF_ERROR(Ip({"netns", "add", bridge}));
  namespaces_.push_back(bridge);
  RETURN_IF_ERROR(Ip({"-n", bridge, "link", "add", "name", "br0", "type", "bridge"}));
  RETURN_IF_ERROR(Ip({"-n", bridge, "link", "set", "dev", "br0", "up"}));
  for (size_t k = 0; k < nodes.size(); ++k) {
    const std::string& node = nodes[k];
    Node n{prefix_ + "-" + node, absl::StrCat("10.231.", subnet_, ".", k + 1)};
    RETURN_IF_ERROR(Ip({"netns", "add", n.ns}));
    namespaces_.push_back(n.ns);
    // The bridge-side end is named after the node; the node sees "eth0".
    RETURN_IF_ERROR(Ip({"-n", bridge, "link", "add", "name", node, "type", "veth", "peer",
                        "name", "eth0", "netns", n.ns}));
    RETURN_IF_ERROR(Ip({"-n", bridge, "link", "set", "dev", node, "master", "br0"}));
    RETURN_IF_ERROR(Ip({"-n", bridge, "link", "set", "dev", node, "up"}));
    RETURN_IF_ERROR(Ip({"-n", n.ns, "addr", "add", n.address + "/24", "dev", "eth0"}));
    RETURN_IF_ERROR(Ip({"-n", n.ns, "link", "set", "dev", "eth0", "up"}));
    RETURN_IF_ERROR(Ip({"-n", n.ns, "link", "set", "dev", "lo", "up"}));
    const ino_t inode = InodeOf(absl::StrCat(kNetnsDir, "/", n.ns));
    if (inode == 0) return absl::InternalError("cannot stat namespace " + n.ns);
    node_of_[inode] = node;
    nodes_[node] = std::move(n);
  }
  host_link_ = absl::StrCat(kHostLinkPrefix, getpid());
  RETURN_IF_ERROR(Ip({"link", "add", "name", host_link_, "type", "veth", "peer", "name",
                      "host", "netns", bridge}));
  RETURN_IF_ERROR(Ip({"-n", bridge, "link", "set", "dev", "host", "master", "br0"}));
  RETURN_IF_ERROR(Ip({"-n", bridge, "link", "set", "dev", "host", "up"}));
  RETURN_IF_ERROR(Ip({"addr", "add", HostAddress() + "/24", "dev", host_link_}));
  RETURN_IF_ERROR(Ip({"link", "set", "dev", host_link_, "up"}));
  // Traffic for the subnet must leave through our leg, never the default route.
  absl::StatusOr<std::string> route = RunCommand(
      {ip_, "-4", "route", "get", nodes_.begin()->second.address}, scratch_dir_);
  if (!route.ok()) return route.status();
  if (!absl::StrContains(*route, "dev " + host_link_)) {
    return absl::InternalError("the subnet is not routed through " + host_link_ + ": " +
                               *route);
  }
  return absl::OkStatus();
}

NetnsCluster::~NetnsCluster() {
  KillProcessesInside();
  if (!host_link_.empty()) {
    absl::Status s = Ip({"link", "delete", "dev", host_link_});
    if (!s.ok()) std::cerr << "netns cluster: " << s << "\n";
  }
  for (auto it = namespaces_.rbegin(); it != namespaces_.rend(); ++it) {
    absl::Status s = Ip({"netns", "delete", *it});
    if (!s.ok()) std::cerr << "netns cluster: " << s << "\n";
  }
}

void NetnsCluster::KillProcessesInside() {
  std::set<ino_t> inodes;
  for (const auto& [inode, node] : node_of_) inodes.insert(inode);
  KillProcessesIn(inodes);
}

const std::string& NetnsCluster::Namespace(const std::string& node) const {
  return nodes_.at(node).ns;
}

const std::string& NetnsCluster::Address(const std::string& node) const {
  return nodes_.at(node).address;
}

std::string NetnsCluster::HostAddress() const {
  return absl::StrCat("10.231.", subnet_, ".254");
}

std::vector<std::string> NetnsCluster::InNode(const std::string& node,
                                              std::vector<std::string> argv) const {
  std::vector<std::string> wrapped = {ip_, "netns", "exec", Namespace(node)};
  wrapped.insert(wrapped.end(), std::make_move_iterator(argv.begin()),
                 std::make_move_iterator(argv.end()));
  return wrapped;
}

absl::Status NetnsCluster::Cut(const std::string& node) {
  return Ip({"-n", prefix_ + "-br", "link", "set", "dev", node, "down"});
}

absl::Status NetnsCluster::Heal(const std::string& node) {
  return Ip({"-n", prefix_ + "-br", "link", "set", "dev", node, "up"});
}

std::string NetnsCluster::NodeOf(pid_t pid) const {
  auto it = node_of_.find(InodeOf(absl::StrCat("/proc/", pid, "/ns/net")));
  return it == node_of_.end() ? "" : it->second;
}

void RemoveStaleFaultState(const std::string& scratch_dir) {
  const std::string ip = FindProgram("ip");
  if (ip.empty()) return;
  std::error_code ec;
  std::set<ino_t> stale_inodes;
  std::vector<std::string> stale_namespaces;
  for (const auto& entry : std::filesystem::directory_iterator(kNetnsDir, ec)) {
    const std::string name = entry.path().filename().string();
    const pid_t pid = PidInName(name, kNamePrefix);
    if (pid == 0 || ProcessAlive(pid)) continue;
    stale_inodes.insert(InodeOf(entry.path().string()));
    stale_namespaces.push_back(name);
  }
  KillProcessesIn(stale_inodes);
  for (const std::string& name : stale_namespaces) {
    std::cerr << "fault tests: removing namespace " << name << " of a run that died\n";
    (void)RunCommand({ip, "netns", "delete", name}, scratch_dir);
  }
  absl::StatusOr<std::string> links = RunCommand({ip, "-o", "link"}, scratch_dir);
  if (links.ok()) {
    for (absl::string_view line : absl::StrSplit(*links, '\n', absl::SkipEmpty())) {
      // "12: tsf4242@if11: <BROADCAST,..."
      std::vector<absl::string_view> fields = absl::StrSplit(line, ": ");
      if (fields.size() < 2) continue;
      const std::string name(fields[1].substr(0, fields[1].find('@')));
      const pid_t pid = PidInName(name, kHostLinkPrefix);
      if (pid == 0 || ProcessAlive(pid) || name != absl::StrCat(kHostLinkPrefix, pid)) {
        continue;
      }
      std::cerr << "fault tests: removing link " << name << " of a run that died\n";
      (void)RunCommand({ip, "link", "delete", "dev", name}, scratch_dir);
    }
  }
  for (absl::string_view line :
       absl::StrSplit(testing::ReadFile("/proc/self/mounts"), '\n', absl::SkipEmpty())) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    if (fields.size() < 2) continue;
    const std::string& mount_point = fields[1];
    const pid_t pid =
        PidInName(std::filesystem::path(mount_point).filename().string(), kMountPrefix);
    if (pid == 0 || ProcessAlive(pid)) continue;
    std::cerr << "fault tests: unmounting " << mount_point << " of a run that died\n";
    umount2(mount_point.c_str(), MNT_DETACH);
  }
}

}  // namespace tessera::faults
