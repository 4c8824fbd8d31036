// End to end over TLS: a real tessera-coordinator with --tls-self-signed,
// tessera-worker daemons that pin its certificate from their join token, and
// real tessera-train ranks whose channel trusts the same certificate.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_tls.h"
#include "common/tls.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/cluster_fixture.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

std::string TinyJob() {
  return R"(name: e2e-tls
world_size: 2
trainer:
  model: vit-micro
  dataset: synthetic
  epochs: 1
  max_steps: 4
  batch_size: 16
  train_subset: 128
  test_subset: 32
  metrics_every: 2
)";
}

class TlsClusterTest : public ClusterTest {
 protected:
  // Tokens made with --tls-self-signed: they carry the certificate's pin, and
  // the first one creates the certificate in the database.
  void MakePinnedTokens() {
    EnsureTokens({"--tls-self-signed"});
    pin_ = SplitTokenPin(join_token_).pin;
  }

  // The coordinator with --tls-self-signed, and the test's own channel pinned
  // to its certificate.
  void StartTlsCoordinator() {
    StartCoordinator(0, {"--tls-self-signed"});
    const std::string address = absl::StrCat("127.0.0.1:", port_);
    absl::StatusOr<ClientTls> tls = ResolveClientTls(address, "", pin_);
    ASSERT_TRUE(tls.ok()) << tls.status() << "\n" << coordinator_->Log();
    grpc::ChannelArguments args;
    channel_ = grpc::experimental::CreateCustomChannelWithInterceptors(
        address, ChannelCredentialsFor(*tls, args), args,
        testing::BearerInterceptors(SplitTokenPin(user_token_).token));
    jobs_ = v1::JobService::NewStub(channel_);
  }

  std::string pin_;
};

TEST_F(TlsClusterTest, PinnedWorkersRegisterAndAJobRunsOverTls) {
  MakePinnedTokens();
  ASSERT_EQ(pin_.size(), 64u) << join_token_;
  StartTlsCoordinator();
  EXPECT_THAT(coordinator_->Log(), HasSubstr(pin_));
  StartWorker("w1", port_);
  StartWorker("w2", port_);
  WaitForWorkers(2);
  const int64_t id = Submit(TinyJob());
  v1::Job job = WaitForEnd(id, absl::Minutes(4));
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DumpLogs();
  // The ranks reported their metrics through the TLS listener.
  EXPECT_FALSE(Metrics(id).empty());
  for (const auto& w : workers_) {
    EXPECT_THAT(w->Log(), HasSubstr("matches the join token's pin")) << w->Log();
  }

  // A restart keeps the certificate, so the same pin still holds.
  coordinator_->Signal(SIGTERM);
  ASSERT_TRUE(coordinator_->Wait(absl::Seconds(20)).has_value());
  StartTlsCoordinator();
  absl::StatusOr<std::string> cert =
      FetchPeerCertificate(absl::StrCat("127.0.0.1:", port_), absl::Seconds(10));
  ASSERT_TRUE(cert.ok()) << cert.status();
  EXPECT_EQ(*CertificateFingerprint(*cert), pin_);
}

TEST_F(TlsClusterTest, WorkerWithAWrongPinRefusesToStart) {
  MakePinnedTokens();
  StartTlsCoordinator();
  const std::string wrong(64, '0');
  std::ofstream(dir_.File("bad-join-token"), std::ios::trunc)
      << AddPinToToken(SplitTokenPin(join_token_).token, wrong) << "\n";
  auto w = ChildProcess::Start(
      {testing::BinDir() + "/tessera-worker", "--coordinator",
       absl::StrCat("127.0.0.1:", port_), "--name", "bad", "--work-dir",
       dir_.File("work-bad"), "--state-dir", dir_.File("state-bad"), "--join-token-file",
       dir_.File("bad-join-token")},
      dir_.File("bad.log"));
  ASSERT_TRUE(w.ok()) << w.status();
  std::optional<int> status = (*w)->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.has_value()) << "worker kept running with a wrong pin\n"
                                  << (*w)->Log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << (*w)->Log();
  EXPECT_THAT((*w)->Log(), HasSubstr(wrong));
  EXPECT_THAT((*w)->Log(), HasSubstr(pin_));
}

TEST_F(TlsClusterTest, PlaintextWorkerCannotRegisterWithTlsCoordinator) {
  MakePinnedTokens();
  StartTlsCoordinator();
  // The join token without its pin: the worker talks plaintext and never gets in.
  std::ofstream(dir_.File("join-token"), std::ios::trunc)
      << SplitTokenPin(join_token_).token << "\n";
  StartWorker("plain", port_);
  absl::SleepFor(absl::Seconds(3));
  grpc::ClientContext ctx;
  v1::ListWorkersResponse resp;
  grpc::Status s = jobs_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.workers_size(), 0);
  EXPECT_THAT(workers_.back()->Log(), HasSubstr("plaintext"));
}

}  // namespace
}  // namespace tessera
