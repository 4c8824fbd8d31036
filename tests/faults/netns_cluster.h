// NetnsCluster: network namespaces for a multi-host Tessera cluster on one
// machine, for the fault tests.
//
// Every node (the coordinator, each worker) gets its own namespace with one
// veth leg on a private bridge, which lives in a namespace of its own; the test
// process reaches the nodes through one more leg in the host namespace. Cut()
// takes a node's leg down on the bridge side, as a pulled cable would: the node
// keeps its address and its connections, but nothing gets through until Heal().
//
// Names carry the creating process's pid: namespaces "tessera-<pid>-<node>"
// (and "tessera-<pid>-br" for the bridge), the host leg "tsf<pid>", subnet
// 10.231.<n>.0/24 with <n> free on this host. Create() first removes what a run
// that died left behind (names whose pid is gone); the destructor kills every
// process still inside the namespaces and removes them.
//
// All namespaces share this host's file system and /proc, so a process's node
// is found from /proc/PID/ns/net (NodeOf).
//
// Needs root and iproute2; CheckSupported() says why not.
// Thread-safety: NodeOf and the accessors are safe from any thread; the rest
// from one thread.
#ifndef TESSERA_TESTS_FAULTS_NETNS_CLUSTER_H_
#define TESSERA_TESTS_FAULTS_NETNS_CLUSTER_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera::faults {

// Full path of `name`, searched in $PATH and then the sbin directories (root's
// tools are often missing from a test's PATH); empty when not found.
std::string FindProgram(const std::string& name);

// Runs `argv` (argv[0] a full path) with stdout and stderr captured in a file
// under `scratch_dir`; returns the output when it exits 0 within `timeout`,
// else an error that quotes the command and its output.
absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv,
                                       const std::string& scratch_dir,
                                       absl::Duration timeout = absl::Seconds(60));

class NetnsCluster {
 public:
  // OK when this process may create network namespaces: it runs as root, `ip`
  // is installed and a probe namespace can be added and deleted.
  static absl::Status CheckSupported(const std::string& scratch_dir);

  // Creates the bridge namespace, one namespace per node (addresses in node
  // order, .1, .2, ...) and the host leg (.254). `scratch_dir` holds command
  // output and must outlive the cluster.
  static absl::StatusOr<std::unique_ptr<NetnsCluster>> Create(
      const std::vector<std::string>& nodes, const std::string& scratch_dir);

  ~NetnsCluster();
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  const std::string& Namespace(const std::string& node) const;
  const std::string& Address(const std::string& node) const;
  // The test process's own address on the bridge.
  std::string HostAddress() const;

  // argv that runs `argv` inside the node's namespace (through `ip netns exec`,
  // which execs it: the pid a ChildProcess gets is the command's own).
  std::vector<std::string> InNode(const std::string& node,
                                  std::vector<std::string> argv) const;

  // Takes the node's bridge port down (Cut) or up again (Heal).
  absl::Status Cut(const std::string& node);
  absl::Status Heal(const std::string& node);

  // The node whose namespace process `pid` runs in; empty when none of ours
  // (or the process is gone).
  std::string NodeOf(pid_t pid) const;

 private:
  struct Node {
    std::string ns;
    std::string address;
  };
  NetnsCluster(std::string prefix, int subnet, std::string scratch_dir);

  absl::Status Ip(const std::vector<std::string>& args);
  absl::Status Build(const std::vector<std::string>& nodes);
  void KillProcessesInside();

  // Constant after Create().
  const std::string prefix_;  // "tessera-<pid>"
  const int subnet_;          // the <n> of 10.231.<n>.0/24
  const std::string scratch_dir_;
  const std::string ip_;  // path of the ip tool
  std::string host_link_;
  std::map<std::string, Node> nodes_;
  std::vector<std::string> namespaces_;   // created, bridge first
  std::map<ino_t, std::string> node_of_;  // namespace inode -> node
};

// Removes namespaces, host links and mounts left behind by fault-test runs
// whose process is gone: names "tessera-<pid>-...", links "tsf<pid>" and mount
// points whose last path component is "tessera-faults-<pid>-*".
void RemoveStaleFaultState(const std::string& scratch_dir);

}  // namespace tessera::faults

#endif  // TESSERA_TESTS_FAULTS_NETNS_CLUSTER_H_
