// SlurmCluster: a real one-node Slurm cluster (Debian 12's slurm-wlm 22.05 and
// munge) that a test starts and stops itself.
//
// Start() creates a directory $TMPDIR/tessera-slurm-<pid>-XXXXXX (0755, so
// that jobs run as other users reach the munge socket) with:
//   munge.key, munge.sock   its own munged (foreground, its own socket and key)
//   slurm.conf              its own cluster name and free ports; one node, this
//                           host's short name, NodeAddr 127.0.0.1, with
//                           Options::cpus CPUs; one partition; proctrack/
//                           linuxproc and task/none (no systemd, no cgroups);
//                           sched/backfill polling every second; KillWait=2
//   state/ spool/           StateSaveLocation and SlurmdSpoolDir
//   *.log                   the three daemons' output
// and runs munged, slurmctld -D and slurmd -D until sinfo shows the node idle.
// Slurm's commands find this cluster through SLURM_CONF=conf_path(): Run()
// and Env() set it; nothing here changes the test process's environment.
//
// Stop() (also the destructor) cancels the jobs still known, waits briefly
// for them to end, stops the daemons, then kills what is left of the jobs:
// every process whose environment names this cluster's slurm.conf (the
// slurmstepds and job tasks inherit it from slurmd), with its descendants,
// except the test process's own descendants. Start() first kills what a
// crashed earlier run left: processes whose SLURM_CONF points into a
// tessera-slurm-<pid>- directory whose pid no longer lives.
//
// Use from a test (SlurmTest does the first part for you):
//
//   if (absl::Status s = SlurmCluster::CheckSupported(); !s.ok()) {
//     if (SlurmCluster::Required()) GTEST_FAIL() << s.message();
//     GTEST_SKIP() << s.message();
//   }
//   absl::StatusOr<std::unique_ptr<SlurmCluster>> cluster = SlurmCluster::Start();
//   ASSERT_TRUE(cluster.ok()) << cluster.status();
//   (*cluster)->Run({"sbatch", "--parsable", "--wrap", "srun hostname"});
//   // A coordinator: SlurmCommandClientOptions{.slurm_conf = cluster->conf_path()}.
//
// Needs root (slurmd runs jobs as their users) and the Debian packages
// slurm-wlm and munge (scripts/setup.sh installs them). Two clusters may run
// at once on one host (own ports, dirs, munged and cluster name), e.g. under
// ctest -j2.
//
// Thread-safety: none; use from the test thread. The thread that calls
// Start() must outlive the cluster (the daemons get PR_SET_PDEATHSIG).
#ifndef TESSERA_TESTS_TESTING_SLURM_CLUSTER_H_
#define TESSERA_TESTS_TESTING_SLURM_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tessera::testing {

struct SlurmClusterOptions {
  int cpus = 2;               // CPUs of the one node
  int real_memory_mb = 1024;  // its RealMemory
  std::string partition = "debug";
  std::vector<std::string> extra_conf;  // more slurm.conf lines, appended
  // How long Start() waits for the node to be idle.
  absl::Duration start_timeout = absl::Seconds(30);
};

class SlurmCluster {
 public:
  // OK when this process can run a cluster: it is root and the Slurm and munge
  // programs are installed. Otherwise FailedPrecondition saying what is missing.
  static absl::Status CheckSupported();
  // Whether TESSERA_REQUIRE_SLURM=1 (set by .ci/run): then a Slurm test that
  // cannot run must fail instead of skipping.
  static bool Required();

  static absl::StatusOr<std::unique_ptr<SlurmCluster>> Start(
      SlurmClusterOptions options = {});
  ~SlurmCluster();
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  // Stops everything (see the header comment). Idempotent.
  absl::Status Stop();

  const std::string& dir() const { return dir_; }
  const std::string& conf_path() const { return conf_path_; }
  const std::string& node() const { return node_; }
  const std::string& partition() const { return options_.partition; }
  const std::string& cluster_name() const { return cluster_name_; }
  // Where sbatch, squeue, scancel, srun and sinfo are.
  static std::string BinDir() { return "/usr/bin"; }
  // Environment for a Slurm command: PATH, LANG=C, SLURM_CONF.
  std::vector<std::string> Env() const;

  // Runs a Slurm command (argv[0] a name in BinDir(), or a path) against
  // this cluster and returns its stdout; an error with its exit and stderr
  // unless it exits 0.
  absl::StatusOr<std::string> Run(std::vector<std::string> argv,
                                  const std::string& stdin_data = "",
                                  absl::Duration timeout = absl::Seconds(30)) const;

  // The job's compact state (squeue --states=all %t), "" once squeue no
  // longer knows it.
  absl::StatusOr<std::string> JobState(const std::string& id) const;
  // Waits until the job's state is one of `states` ("" = no longer listed).
  absl::Status WaitForJobState(const std::string& id,
                               const std::vector<std::string>& states,
                               absl::Duration timeout) const;
  // Waits until squeue lists no job that is not in a final state.
  absl::Status WaitForNoActiveJobs(absl::Duration timeout) const;

  // The last `bytes` of each daemon's log, for failure messages.
  std::string DaemonLogs(size_t bytes = 4000) const;

  // How long Start() took (munged up to node idle) and the last Stop().
  absl::Duration start_duration() const { return start_duration_; }
  absl::Duration stop_duration() const { return stop_duration_; }

 private:
  struct Daemon {
    std::string name;
    pid_t pid = 0;
    std::string log;
  };

  explicit SlurmCluster(SlurmClusterOptions options) : options_(std::move(options)) {}
  absl::Status StartDaemon(const std::string& name, std::vector<std::string> argv);
  absl::Status WaitForNodeIdle(absl::Duration timeout);
  void StopDaemon(Daemon& daemon);
  // SIGKILLs every process whose environment holds SLURM_CONF=`conf`, and
  // their descendants, except this process's descendants. Returns how many.
  int KillJobProcesses();

  const SlurmClusterOptions options_;
  std::string dir_;
  std::string conf_path_;
  std::string node_;
  std::string cluster_name_;
  std::vector<Daemon> daemons_;  // munged, slurmctld, slurmd, in start order
  bool stopped_ = false;
  absl::Duration start_duration_;
  absl::Duration stop_duration_;
};

// A fixture that starts a SlurmCluster in SetUp (skipping, or failing when
// SlurmCluster::Required(), where it cannot run) and stops it in TearDown,
// printing the daemons' logs when the test failed. Override
// ClusterOptions() to change the cluster.
class SlurmTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  virtual SlurmClusterOptions ClusterOptions() const { return {}; }
  SlurmCluster& cluster() { return *cluster_; }

  std::unique_ptr<SlurmCluster> cluster_;
};

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_TESTING_SLURM_CLUSTER_H_
