#include "tests/testing/slurm_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/process/run_command.h"
#include "coordinator/core/slurm/slurm_client.h"
#include "tests/testing/test_util.h"

namespace tessera::testing {

namespace {

constexpr char kMunged[] = "/usr/sbin/munged";
constexpr char kSlurmctld[] = "/usr/sbin/slurmctld";
constexpr char kSlurmd[] = "/usr/sbin/slurmd";
constexpr char kDirPrefix[] = "tessera-slurm-";

std::string TmpBase() {
  const char* base = getenv("TMPDIR");
  return base != nullptr && base[0] != '\0' ? base : "/tmp";
}

std::string ShortHostname() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  std::string name = buf;
  return name.substr(0, name.find('.'));
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

// Every process's parent, from /proc/PID/stat.
std::map<pid_t, pid_t> ParentsByPid() {
  std::map<pid_t, pid_t> parents;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    const std::string stat = ReadFile(entry.path().string() + "/stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::vector<std::string> fields =
        absl::StrSplit(stat.substr(paren + 2), ' ', absl::SkipEmpty());
    int ppid = 0;
    if (fields.size() < 2 || fields[0] == "Z" || !absl::SimpleAtoi(fields[1], &ppid)) {
      continue;
    }
    parents[pid] = ppid;
  }
  return parents;
}

// The value of SLURM_CONF in the process's environment, "" if none.
std::string SlurmConfOf(pid_t pid) {
  const std::string environ = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
  for (absl::string_view entry : absl::StrSplit(environ, '\0')) {
    if (absl::ConsumePrefix(&entry, "SLURM_CONF=")) return std::string(entry);
  }
  return "";
}

bool DescendsFrom(pid_t pid, pid_t ancestor, const std::map<pid_t, pid_t>& parents) {
  for (int hops = 0; hops < 1000 && pid > 1; ++hops) {
    if (pid == ancestor) return true;
    auto it = parents.find(pid);
    if (it == parents.end()) return false;
    pid = it->second;
  }
  return false;
}

// SIGKILLs the processes `is_seed` picks, and all their descendants, except
// this process and its descendants. Returns how many got the signal.
template <typename Pred>
int KillTrees(Pred is_seed) {
  int killed = 0;
  const pid_t self = getpid();
  // Twice: a process may fork while the first pass runs.
  for (int pass = 0; pass < 2; ++pass) {
    const std::map<pid_t, pid_t> parents = ParentsByPid();
    std::set<pid_t> seeds;
    for (const auto& [pid, ppid] : parents) {
      if (pid != self && !DescendsFrom(pid, self, parents) && is_seed(pid)) {
        seeds.insert(pid);
      }
    }
    for (const auto& [pid, ppid] : parents) {
      bool doomed = false;
      for (pid_t seed : seeds) doomed = doomed || DescendsFrom(pid, seed, parents);
      if (!doomed || DescendsFrom(pid, self, parents)) continue;
      if (kill(pid, SIGKILL) == 0) ++killed;
    }
  }
  return killed;
}

// Kills the job processes of clusters whose test process died without
// stopping them: SLURM_CONF under TMPDIR/tessera-slurm-<pid>-* with that
// pid gone.
void KillOrphansOfDeadRuns() {
  const std::string prefix = absl::StrCat(TmpBase(), "/", kDirPrefix);
  KillTrees([&](pid_t pid) {
    std::string conf = SlurmConfOf(pid);
    absl::string_view rest = conf;
    if (!absl::ConsumePrefix(&rest, prefix)) return false;
    int owner = 0;
    return absl::SimpleAtoi(rest.substr(0, rest.find('-')), &owner) && owner > 0 &&
           !Alive(owner);
  });
}

std::string Tail(const std::string& text, size_t bytes) {
  return text.size() <= bytes ? text : text.substr(text.size() - bytes);
}

}  // namespace

absl::Status SlurmCluster::CheckSupported() {
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(
        "Slurm tests need root (they start slurmctld, slurmd and munged, and slurmd "
        "runs jobs as their users); run them as root");
  }
  std::vector<std::string> missing;
  for (const std::string& p :
       {std::string(kMunged), std::string(kSlurmctld), std::string(kSlurmd),
        BinDir() + "/sbatch", BinDir() + "/squeue", BinDir() + "/scancel",
        BinDir() + "/sinfo", BinDir() + "/srun"}) {
    if (access(p.c_str(), X_OK) != 0) missing.push_back(p);
  }
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Slurm tests need Debian's slurm-wlm and munge (scripts/setup.sh "
                     "installs them); missing: ",
                     absl::StrJoin(missing, ", ")));
  }
  return absl::OkStatus();
}

bool SlurmCluster::Required() {
  const char* v = getenv("TESSERA_REQUIRE_SLURM");
  return v != nullptr && std::string(v) == "1";
}

absl::StatusOr<std::unique_ptr<SlurmCluster>> SlurmCluster::Start(
    SlurmClusterOptions options) {
  static std::atomic<int> counter{0};
  const absl::Time t0 = absl::Now();
  if (absl::Status s = CheckSupported(); !s.ok()) return s;
  KillOrphansOfDeadRuns();

  std::unique_ptr<SlurmCluster> c(new SlurmCluster(std::move(options)));
  std::string tmpl = absl::StrCat(TmpBase(), "/", kDirPrefix, getpid(), "-XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", tmpl, ": ", strerror(errno)));
  }
  c->dir_ = tmpl;
  c->conf_path_ = c->dir_ + "/slurm.conf";
  c->node_ = ShortHostname();
  c->cluster_name_ = absl::StrCat("tessera", getpid(), "n", counter++);
  // 0755: jobs that run as other users reach the munge socket.
  chmod(c->dir_.c_str(), 0755);
  for (const char* sub : {"state", "spool"}) {
    if (mkdir((c->dir_ + "/" + sub).c_str(), 0755) != 0) {
      return absl::InternalError(absl::StrCat("mkdir ", sub, ": ", strerror(errno)));
    }
  }

  // munged: its own key (random bytes, 0600) and socket.
  const std::string key = c->dir_ + "/munge.key";
  {
    std::ifstream random("/dev/urandom", std::ios::binary);
    std::string bytes(1024, '\0');
    random.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    const int fd = open(key.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 ||
        write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
      if (fd >= 0) close(fd);
      return absl::InternalError(absl::StrCat("cannot write ", key));
    }
    close(fd);
  }
  const std::string socket = c->dir_ + "/munge.sock";
  if (absl::Status s = c->StartDaemon(
          "munged", {kMunged, "-F", "--force", "--num-threads=2", "--socket=" + socket,
                     "--key-file=" + key, "--pid-file=" + c->dir_ + "/munged.pid",
                     "--seed-file=" + c->dir_ + "/munged.seed",
                     "--log-file=" + c->dir_ + "/munged.log"});
      !s.ok()) {
    return s;
  }
  for (absl::Time until = absl::Now() + absl::Seconds(10);
       access(socket.c_str(), F_OK) != 0;) {
    if (absl::Now() > until || !Alive(c->daemons_.back().pid)) {
      return absl::InternalError(
          absl::StrCat("munged did not create its socket: ", c->DaemonLogs()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  // slurm.conf
  const int ctld_port = PickUnusedPort();
  int slurmd_port = PickUnusedPort();
  while (slurmd_port == ctld_port) slurmd_port = PickUnusedPort();
  const SlurmClusterOptions& o = c->options_;
  std::vector<std::string> conf = {
      "# Generated by tests/testing/slurm_cluster.cc for one test run.",
      "ClusterName=" + c->cluster_name_,
      absl::StrCat("SlurmctldHost=", c->node_, "(127.0.0.1)"),
      absl::StrCat("SlurmctldPort=", ctld_port),
      absl::StrCat("SlurmdPort=", slurmd_port),
      "SlurmUser=root",
      "SlurmdUser=root",
      "AuthType=auth/munge",
      "CredType=cred/munge",
      "AuthInfo=socket=" + socket,
      "StateSaveLocation=" + c->dir_ + "/state",
      "SlurmdSpoolDir=" + c->dir_ + "/spool",
      "SlurmctldPidFile=" + c->dir_ + "/slurmctld.pid",
      "SlurmdPidFile=" + c->dir_ + "/slurmd.pid",
      "SlurmctldLogFile=" + c->dir_ + "/slurmctld.log",
      "SlurmdLogFile=" + c->dir_ + "/slurmd.log",
      "MailProg=/bin/true",
      // No systemd as PID 1 and hybrid cgroups: track processes by /proc.
      "ProctrackType=proctrack/linuxproc",
      "TaskPlugin=task/none",
      "JobAcctGatherType=jobacct_gather/none",
      "AccountingStorageType=accounting_storage/none",
      "JobCompType=jobcomp/none",
      "MpiDefault=none",
      "SelectType=select/cons_tres",
      "SelectTypeParameters=CR_CPU",
      // Slurm's default scheduler, looking at the queue every second instead
      // of every 30 s / 60 s: a job starts within about a second.
      "SchedulerType=sched/backfill",
      "SchedulerParameters=bf_interval=1,sched_interval=1,batch_sched_delay=0",
      "ReturnToService=2",
      "KillWait=2",
      "MinJobAge=10",
      "SlurmctldTimeout=30",
      "SlurmdTimeout=30",
      "InactiveLimit=0",
      absl::StrCat("NodeName=", c->node_, " NodeAddr=127.0.0.1 CPUs=", o.cpus,
                   " RealMemory=", o.real_memory_mb, " State=UNKNOWN"),
      absl::StrCat("PartitionName=", o.partition, " Nodes=", c->node_,
                   " Default=YES MaxTime=INFINITE State=UP"),
  };
  conf.insert(conf.end(), o.extra_conf.begin(), o.extra_conf.end());
  {
    std::ofstream out(c->conf_path_);
    out << absl::StrJoin(conf, "\n") << "\n";
    if (!out.good()) return absl::InternalError("cannot write " + c->conf_path_);
  }

  if (absl::Status s =
          c->StartDaemon("slurmctld", {kSlurmctld, "-D", "-f", c->conf_path_});
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          c->StartDaemon("slurmd", {kSlurmd, "-D", "-f", c->conf_path_, "-N", c->node_});
      !s.ok()) {
    return s;
  }
  if (absl::Status s = c->WaitForNodeIdle(o.start_timeout); !s.ok()) return s;
  c->start_duration_ = absl::Now() - t0;
  return c;
}

SlurmCluster::~SlurmCluster() { Stop().IgnoreError(); }

std::vector<std::string> SlurmCluster::Env() const {
  return {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C", "HOME=/root",
          "SLURM_CONF=" + conf_path_};
}

absl::Status SlurmCluster::StartDaemon(const std::string& name,
                                       std::vector<std::string> argv) {
  Daemon d{name, 0, absl::StrCat(dir_, "/", name, ".out")};
  // Prepared before fork.
  std::vector<std::string> env = Env();
  std::vector<char*> args, envp;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const int fd = open(d.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError("cannot open " + d.log);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    const int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, STDIN_FILENO);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    if (chdir(dir_.c_str()) != 0) _exit(126);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(fd);
  d.pid = pid;
  daemons_.push_back(d);
  return absl::OkStatus();
}

absl::Status SlurmCluster::WaitForNodeIdle(absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  std::string last;
  while (absl::Now() < until) {
    for (Daemon& d : daemons_) {
      int status = 0;
      if (waitpid(d.pid, &status, WNOHANG) == d.pid) {
        d.pid = 0;
        return absl::InternalError(absl::StrCat(d.name, " exited during start (status ",
                                                status, "): ", DaemonLogs()));
      }
    }
    absl::StatusOr<std::string> out =
        Run({"sinfo", "-h", "-N", "-n", node_, "-o", "%T"}, "", absl::Seconds(5));
    last = out.ok() ? std::string(absl::StripAsciiWhitespace(*out))
                    : out.status().ToString();
    if (last == "idle") return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("node ", node_, " not idle within ", absl::FormatDuration(timeout),
                   " (sinfo: ", last, "): ", DaemonLogs()));
}

void SlurmCluster::StopDaemon(Daemon& d) {
  if (d.pid <= 0) return;
  kill(d.pid, SIGTERM);
  const absl::Time until = absl::Now() + absl::Seconds(10);
  int status = 0;
  while (waitpid(d.pid, &status, WNOHANG) == 0) {
    if (absl::Now() > until) {
      kill(-d.pid, SIGKILL);
      kill(d.pid, SIGKILL);
      waitpid(d.pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  d.pid = 0;
}

int SlurmCluster::KillJobProcesses() {
  const std::string conf = conf_path_;
  return KillTrees([&](pid_t pid) { return SlurmConfOf(pid) == conf; });
}

absl::Status SlurmCluster::Stop() {
  if (stopped_) return absl::OkStatus();
  stopped_ = true;
  const absl::Time t0 = absl::Now();
  absl::Status result;
  // Jobs first, through Slurm, so that their programs get SIGTERM and KillWait.
  bool ctld_up = false;
  for (const Daemon& d : daemons_)
    ctld_up = ctld_up || (d.name == "slurmctld" && d.pid > 0);
  if (ctld_up) {
    absl::StatusOr<std::string> jobs =
        Run({"squeue", "-h", "-o", "%i %t"}, "", absl::Seconds(5));
    std::vector<std::string> active;
    if (jobs.ok()) {
      for (absl::string_view line : absl::StrSplit(*jobs, '\n', absl::SkipWhitespace())) {
        std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
        if (f.size() == 2 && !IsSlurmStateFinal(f[1])) active.push_back(f[0]);
      }
    }
    if (!active.empty()) {
      std::vector<std::string> argv = {"scancel"};
      argv.insert(argv.end(), active.begin(), active.end());
      Run(argv, "", absl::Seconds(5)).IgnoreError();
      result = WaitForNoActiveJobs(absl::Seconds(10));
    }
  }
  // Daemons in reverse start order; munged last, after what uses it.
  for (auto it = daemons_.rbegin(); it != daemons_.rend(); ++it) {
    if (it->name == "munged") KillJobProcesses();
    StopDaemon(*it);
  }
  KillJobProcesses();
  stop_duration_ = absl::Now() - t0;
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  return result;
}

absl::StatusOr<std::string> SlurmCluster::Run(std::vector<std::string> argv,
                                              const std::string& stdin_data,
                                              absl::Duration timeout) const {
  if (argv.empty()) return absl::InvalidArgumentError("Run: empty argv");
  if (argv[0].find('/') == std::string::npos) argv[0] = BinDir() + "/" + argv[0];
  CommandSpec spec;
  spec.argv = argv;
  spec.env = Env();
  spec.stdin_data = stdin_data;
  spec.working_dir = dir_;
  spec.timeout = timeout;
  absl::StatusOr<CommandResult> r = RunCommand(spec);
  if (!r.ok()) return r.status();
  if (!r->succeeded()) {
    return absl::InternalError(
        absl::StrCat(absl::StrJoin(argv, " "), ": ", DescribeExit(*r), ": ", r->err));
  }
  return r->out;
}

absl::StatusOr<std::string> SlurmCluster::JobState(const std::string& id) const {
  CommandSpec spec;
  spec.argv = {BinDir() + "/squeue", "-h", "--states=all", "-j", id, "-o", "%t"};
  spec.env = Env();
  spec.timeout = absl::Seconds(10);
  absl::StatusOr<CommandResult> r = RunCommand(spec);
  if (!r.ok()) return r.status();
  if (!r->succeeded()) {
    // squeue fails for an id that slurmctld no longer knows.
    if (absl::StrContains(r->err, "Invalid job id")) return std::string();
    return absl::InternalError(absl::StrCat("squeue: ", DescribeExit(*r), ": ", r->err));
  }
  return std::string(absl::StripAsciiWhitespace(r->out));
}

absl::Status SlurmCluster::WaitForJobState(const std::string& id,
                                           const std::vector<std::string>& states,
                                           absl::Duration timeout) const {
  const absl::Time until = absl::Now() + timeout;
  std::string last;
  while (absl::Now() < until) {
    absl::StatusOr<std::string> s = JobState(id);
    if (s.ok()) {
      last = *s;
      for (const std::string& want : states) {
        if (last == want) return absl::OkStatus();
      }
    } else {
      last = s.status().ToString();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("Slurm job ", id, " not in [", absl::StrJoin(states, ","), "] within ",
                   absl::FormatDuration(timeout), "; last state '", last, "'"));
}

absl::Status SlurmCluster::WaitForNoActiveJobs(absl::Duration timeout) const {
  const absl::Time until = absl::Now() + timeout;
  std::string last;
  while (absl::Now() < until) {
    absl::StatusOr<std::string> jobs =
        Run({"squeue", "-h", "-o", "%i %t"}, "", absl::Seconds(5));
    if (jobs.ok()) {
      last = *jobs;
      bool any = false;
      for (absl::string_view line : absl::StrSplit(*jobs, '\n', absl::SkipWhitespace())) {
        std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
        any = any || (f.size() == 2 && !IsSlurmStateFinal(f[1]));
      }
      if (!any) return absl::OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "Slurm jobs still active after ", absl::FormatDuration(timeout), ": ", last));
}

std::string SlurmCluster::DaemonLogs(size_t bytes) const {
  std::string all;
  for (const char* name : {"munged.out", "munged.log", "slurmctld.log", "slurmd.log",
                           "slurmctld.out", "slurmd.out"}) {
    const std::string text = ReadFile(dir_ + "/" + name);
    if (text.empty()) continue;
    absl::StrAppend(&all, "\n--- ", name, " (tail) ---\n", Tail(text, bytes));
  }
  return all;
}

void SlurmTest::SetUp() {
  if (absl::Status s = SlurmCluster::CheckSupported(); !s.ok()) {
    if (SlurmCluster::Required()) {
      GTEST_FAIL() << "TESSERA_REQUIRE_SLURM=1 but " << s.message();
    }
    GTEST_SKIP() << s.message();
  }
  absl::StatusOr<std::unique_ptr<SlurmCluster>> c = SlurmCluster::Start(ClusterOptions());
  ASSERT_TRUE(c.ok()) << c.status();
  cluster_ = std::move(*c);
}

void SlurmTest::TearDown() {
  if (cluster_ == nullptr) return;
  if (HasFailure()) std::cerr << "Slurm daemon logs:" << cluster_->DaemonLogs() << "\n";
  EXPECT_TRUE(cluster_->Stop().ok());
  cluster_.reset();
}

}  // namespace tessera::testing
