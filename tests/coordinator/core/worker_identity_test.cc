// WorkerIdentity over a JobManager with a fake clock and an in-memory SQLite
// store: per-worker credentials bound to names, the refusal of a live name
// without its credential, a restart with it, ShipLogs limited to the caller's
// ranks, field limits, and errors that name no epoch.
#include "coordinator/core/worker_identity.h"

#include <algorithm>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/core/job_manager.h"
#include "coordinator/store/sqlite_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class WorkerIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = SqliteStore::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    writer_ = std::make_unique<StoreWriter>(store_.get());
    JobManagerOptions options;
    options.worker_suspect_after = absl::Seconds(3);
    options.worker_dead_after = absl::Seconds(15);
    manager_ =
        std::make_unique<JobManager>(store_.get(), writer_.get(), &clock_, options);
    ASSERT_TRUE(manager_->Recover().ok());
    identity_ = NewIdentity();
  }

  std::unique_ptr<WorkerIdentity> NewIdentity() {
    auto identity = std::make_unique<WorkerIdentity>(
        store_.get(), &clock_, &manager_->workers(), WorkerIdentity::Options());
    EXPECT_TRUE(identity->Recover().ok());
    return identity;
  }

  absl::StatusOr<v1::RegisterWorkerResponse> Register(const std::string& name,
                                                      const std::string& credential,
                                                      int slots = 1) {
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_hostname(name + ".lab");
    req.set_slots(slots);
    req.set_worker_credential(credential);
    return identity_->RegisterWorker(req);
  }

  absl::StatusOr<v1::HeartbeatResponse> Beat(const std::string& name, int64_t epoch,
                                             const std::string& credential) {
    v1::HeartbeatRequest req;
    req.set_name(name);
    req.set_epoch(epoch);
    req.set_worker_credential(credential);
    return identity_->Heartbeat(req);
  }

  int64_t Submit() {
    v1::JobSpec spec;
    spec.set_name("job");
    spec.set_world_size(1);
    spec.mutable_trainer()->set_model("vit-micro");
    spec.mutable_trainer()->set_dataset("synthetic");
    spec.mutable_trainer()->set_batch_size(8);
    spec.mutable_trainer()->set_epochs(1);
    auto id = manager_->jobs().Submit(spec, "", "");
    EXPECT_TRUE(id.ok()) << id.status();
    return *id;
  }

  v1::ShipLogsRequest Ship(const std::string& name, int64_t epoch,
                           const std::string& credential, int64_t job) {
    v1::ShipLogsRequest req;
    req.set_name(name);
    req.set_epoch(epoch);
    req.set_worker_credential(credential);
    req.set_job_id(job);
    req.set_attempt(1);
    req.set_rank(0);
    req.set_data("hello\n");
    return req;
  }

  FakeClock clock_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<StoreWriter> writer_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<WorkerIdentity> identity_;
};

bool HasDigit(absl::string_view text) {
  return std::any_of(text.begin(), text.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

TEST_F(WorkerIdentityTest, FirstRegistrationIssuesACredentialThatHeartbeatsNeed) {
  auto first = Register("alpha", "");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(first->worker_credential(), StartsWith("tsr_worker_"));
  EXPECT_EQ(first->worker_credential().size(), std::string("tsr_worker_").size() + 64);

  EXPECT_TRUE(Beat("alpha", first->epoch(), first->worker_credential()).ok());
  // The join token alone (no credential, or another one) speaks for no worker.
  absl::Status bare = Beat("alpha", first->epoch(), "").status();
  EXPECT_TRUE(absl::IsPermissionDenied(bare)) << bare;
  absl::Status wrong =
      Beat("alpha", first->epoch(), "tsr_worker_" + std::string(64, '0')).status();
  EXPECT_TRUE(absl::IsPermissionDenied(wrong)) << wrong;
}

TEST_F(WorkerIdentityTest, LiveNameWithoutItsCredentialIsRefusedAndKeepsItsSession) {
  auto owner = Register("alpha", "");
  ASSERT_TRUE(owner.ok());
  for (const std::string& presented :
       {std::string(), "tsr_worker_" + std::string(64, 'a')}) {
    auto impostor = Register("alpha", presented);
    ASSERT_TRUE(absl::IsPermissionDenied(impostor.status())) << impostor.status();
    EXPECT_THAT(impostor.status().message(), HasSubstr("belongs to a live worker"));
    EXPECT_FALSE(HasDigit(impostor.status().message())) << impostor.status();
  }
  // The owner's session is untouched: same epoch, same credential.
  EXPECT_TRUE(Beat("alpha", owner->epoch(), owner->worker_credential()).ok());
}

TEST_F(WorkerIdentityTest, RestartWithItsCredentialIsAcceptedAtOnceWithANewEpoch) {
  auto first = Register("alpha", "");
  ASSERT_TRUE(first.ok());
  clock_.Advance(absl::Seconds(1));  // still live: no wait for dead_after
  auto again = Register("alpha", first->worker_credential());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_GT(again->epoch(), first->epoch());
  EXPECT_TRUE(again->worker_credential().empty()) << "the kept credential stays valid";
  EXPECT_TRUE(Beat("alpha", again->epoch(), first->worker_credential()).ok());
  // The old session is fenced, and the refusal names no epoch.
  absl::Status stale = Beat("alpha", first->epoch(), first->worker_credential()).status();
  ASSERT_TRUE(absl::IsAborted(stale)) << stale;
  EXPECT_THAT(stale.message(), Not(HasSubstr("epoch")));
  EXPECT_FALSE(HasDigit(stale.message())) << stale;
}

TEST_F(WorkerIdentityTest, CredentialsSurviveACoordinatorRestart) {
  auto first = Register("alpha", "");
  ASSERT_TRUE(first.ok());
  identity_ = NewIdentity();  // a new coordinator process over the same store
  EXPECT_TRUE(Beat("alpha", first->epoch(), first->worker_credential()).ok());
  EXPECT_TRUE(absl::IsPermissionDenied(Register("alpha", "").status()));
  EXPECT_TRUE(Register("alpha", first->worker_credential()).ok());
}

TEST_F(WorkerIdentityTest, NameOfADeadWorkerMayBeClaimedWithTheJoinTokenAlone) {
  auto first = Register("alpha", "");
  ASSERT_TRUE(first.ok());
  clock_.Advance(absl::Seconds(16));
  manager_->Tick();  // declares alpha dead
  auto claimed = Register("alpha", "");
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_FALSE(claimed->worker_credential().empty());
  EXPECT_NE(claimed->worker_credential(), first->worker_credential());
  // The old credential no longer speaks for the name.
  EXPECT_TRUE(absl::IsPermissionDenied(
      Beat("alpha", claimed->epoch(), first->worker_credential()).status()));
  EXPECT_TRUE(Beat("alpha", claimed->epoch(), claimed->worker_credential()).ok());
}

TEST_F(WorkerIdentityTest, ShipLogsAcceptsOnlyRanksAssignedToTheCaller) {
  auto alpha = Register("alpha", "", 1);
  auto beta = Register("beta", "", 0);  // no slots: nothing is placed there
  ASSERT_TRUE(alpha.ok() && beta.ok());
  const int64_t job = Submit();
  auto orders = Beat("alpha", alpha->epoch(), alpha->worker_credential());
  ASSERT_TRUE(orders.ok());
  ASSERT_EQ(orders->launch_size(), 1);

  auto foreign =
      identity_->ShipLogs(Ship("beta", beta->epoch(), beta->worker_credential(), job));
  ASSERT_TRUE(absl::IsPermissionDenied(foreign.status())) << foreign.status();
  EXPECT_THAT(foreign.status().message(), HasSubstr("not assigned to worker beta"));
  // Nor with alpha's name and no credential.
  EXPECT_TRUE(absl::IsPermissionDenied(
      identity_->ShipLogs(Ship("alpha", alpha->epoch(), "", job)).status()));

  auto own =
      identity_->ShipLogs(Ship("alpha", alpha->epoch(), alpha->worker_credential(), job));
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->next_offset(), 6);

  // Once the job ended and left memory, the stored placement decides.
  v1::HeartbeatRequest exit;
  exit.set_name("alpha");
  exit.set_epoch(alpha->epoch());
  exit.set_worker_credential(alpha->worker_credential());
  v1::LocalRank* rank = exit.add_ranks();
  rank->set_job_id(job);
  rank->set_attempt(1);
  rank->set_rank(0);
  rank->set_exited(true);
  ASSERT_TRUE(identity_->Heartbeat(exit).ok());
  v1::ShipLogsRequest tail =
      Ship("alpha", alpha->epoch(), alpha->worker_credential(), job);
  tail.set_offset(6);
  tail.set_eof(true);
  EXPECT_TRUE(identity_->ShipLogs(tail).ok());
  tail.set_name("beta");
  tail.set_epoch(beta->epoch());
  tail.set_worker_credential(beta->worker_credential());
  EXPECT_TRUE(absl::IsPermissionDenied(identity_->ShipLogs(tail).status()));
}

TEST_F(WorkerIdentityTest, OversizedOrMalformedFieldsAreInvalidArgument) {
  v1::RegisterWorkerRequest req;
  req.set_slots(1);
  for (const std::string& bad : {std::string(), std::string(129, 'w'), std::string("a/b"),
                                 std::string("-x"), std::string("name with space")}) {
    req.set_name(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(identity_->RegisterWorker(req).status())) << bad;
  }
  req.set_name("alpha");
  req.set_hostname(std::string(256, 'h'));
  EXPECT_TRUE(absl::IsInvalidArgument(identity_->RegisterWorker(req).status()));
  req.set_hostname("alpha.lab");
  req.set_device_kind(std::string(33, 'c'));
  EXPECT_TRUE(absl::IsInvalidArgument(identity_->RegisterWorker(req).status()));
  req.set_device_kind("cpu\n");
  EXPECT_TRUE(absl::IsInvalidArgument(identity_->RegisterWorker(req).status()));
  req.set_device_kind("cpu");
  req.set_slots(4097);
  EXPECT_TRUE(absl::IsInvalidArgument(identity_->RegisterWorker(req).status()));
  req.set_slots(1);
  auto ok = identity_->RegisterWorker(req);
  ASSERT_TRUE(ok.ok()) << ok.status();

  v1::HeartbeatRequest beat;
  beat.set_name("alpha");
  beat.set_epoch(ok->epoch());
  beat.set_worker_credential(ok->worker_credential());
  beat.add_ranks()->set_launch_error(std::string(4097, 'e'));
  EXPECT_TRUE(absl::IsInvalidArgument(identity_->Heartbeat(beat).status()));
}

}  // namespace
}  // namespace tessera
