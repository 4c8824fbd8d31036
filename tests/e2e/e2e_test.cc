// End-to-end tests: a real tessera-coordinator, two tessera-worker daemons with
// one CPU slot each, and real tessera-train ranks, all on 127.0.0.1.
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tessera/v1/tessera.grpc.pb.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

constexpr char kDataDir[] = "/usr/share/datasets/fashion-mnist";

// A short but real 2-rank job on Fashion-MNIST.
std::string SpecYaml(bool allreduce) {
  return absl::StrCat(R"(name: e2e-fmnist
world_size: 2
trainer:
  model: vit-micro
  dataset: fashion-mnist
  data_dir: )",
                      kDataDir, R"(
  epochs: 1
  max_steps: 12
  batch_size: 32
  lr: 0.002
  train_subset: 2048
  test_subset: 256
  metrics_every: 4
  seed: 7
  allreduce: )",
                      allreduce ? "true" : "false", "\n");
}

TEST_F(ClusterTest, TwoRankJobSucceedsWithMatchingParameterHashes) {
  if (!std::filesystem::exists(std::string(kDataDir) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed; run scripts/setup.sh";
  }
  StartCoordinator();
  StartWorker("w1", port_);
  StartWorker("w2", port_);
  WaitForWorkers(2);

  const int64_t with_allreduce = Submit(SpecYaml(/*allreduce=*/true));
  v1::Job job = WaitForEnd(with_allreduce, absl::Minutes(4));
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason() << "\n" << DumpLogs();
  ASSERT_EQ(job.ranks_size(), 2);
  std::set<std::string> workers_used;
  for (const auto& r : job.ranks()) {
    EXPECT_TRUE(r.has_result()) << "rank " << r.rank() << " reported no result";
    EXPECT_EQ(r.param_hash().size(), 16u);
    workers_used.insert(r.worker());
  }
  EXPECT_EQ(workers_used.size(), 2u) << "the gang should span both one-slot workers";
  EXPECT_EQ(job.ranks(0).param_hash(), job.ranks(1).param_hash())
      << "allreduce must keep the replicas identical";

  std::map<int32_t, int> loss_rows;
  for (const auto& p : Metrics(with_allreduce)) {
    if (p.name() == "loss") ++loss_rows[p.rank()];
  }
  EXPECT_GT(loss_rows[0], 0);
  EXPECT_GT(loss_rows[1], 0);

  // The same job without gradient averaging: each rank fits its own shard.
  const int64_t without = Submit(SpecYaml(/*allreduce=*/false));
  v1::Job solo = WaitForEnd(without, absl::Minutes(4));
  ASSERT_EQ(solo.state(), v1::JOB_STATE_SUCCEEDED) << solo.reason() << "\n" << DumpLogs();
  ASSERT_EQ(solo.ranks_size(), 2);
  EXPECT_NE(solo.ranks(0).param_hash(), solo.ranks(1).param_hash())
      << "without allreduce the replicas must diverge";
}

TEST_F(ClusterTest, WorkerKeepsRetryingUntilCoordinatorAppears) {
  const int port = testing::PickUnusedPort();
  StartWorker("early", port);
  // Each attempt waits up to its 5 s deadline for a connection
  // (wait_for_ready), then logs the failure and retries.
  const absl::Time until = absl::Now() + absl::Seconds(20);
  while (absl::Now() < until &&
         workers_[0]->Log().find("unreachable") == std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_TRUE(workers_[0]->Running()) << workers_[0]->Log();
  EXPECT_THAT(workers_[0]->Log(), HasSubstr("unreachable"));

  StartCoordinator(port);
  WaitForWorkers(1);
}

TEST_F(ClusterTest, FailingRankFailsJobWithReason) {
  StartCoordinator();
  StartWorker("w1", port_);
  StartWorker("w2", port_);
  WaitForWorkers(2);
  // A data directory without the dataset: every rank exits non-zero.
  std::string yaml = SpecYaml(true);
  yaml.replace(yaml.find(kDataDir), std::string(kDataDir).size(),
               dir_.File("no-such-dir"));
  const int64_t id = Submit(yaml);
  v1::Job job = WaitForEnd(id, absl::Minutes(2));
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("exited with code"));
}

TEST_F(ClusterTest, SecondCoordinatorOnTakenPortExitsWithClearMessage) {
  StartCoordinator();
  auto second =
      ChildProcess::Start({testing::BinDir() + "/tessera-coordinator", "--listen",
                           absl::StrCat("127.0.0.1:", port_), "--http", "127.0.0.1:0",
                           "--db", dir_.File("second.db")},
                          dir_.File("second.log"));
  ASSERT_TRUE(second.ok());
  std::optional<int> status = (*second)->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.has_value()) << "second coordinator kept running on a taken port";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0);
  EXPECT_THAT((*second)->Log(),
              HasSubstr(absl::StrCat("cannot listen on 127.0.0.1:", port_)));
}

}  // namespace
}  // namespace tessera
