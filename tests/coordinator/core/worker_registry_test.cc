// WorkerRegistry with a fake clock over an in-memory SQLite store: sessions
// and epochs, liveness (suspect, silent, dead and fenced), what it stores, and
// the rules that reconcile a heartbeat's ranks with the coordinator's beliefs.
#include "coordinator/core/worker_registry.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/store/sqlite_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class WorkerRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = SqliteStore::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    writer_ = std::make_unique<StoreWriter>(store_.get());
    WorkerRegistryOptions options;
    options.heartbeat_interval = absl::Milliseconds(500);
    options.suspect_after = absl::Seconds(3);
    options.dead_after = absl::Seconds(15);
    registry_ = std::make_unique<WorkerRegistry>(writer_.get(), &clock_, options);
  }

  int64_t Register(const std::string& name, int slots = 2) {
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_hostname(name + ".example");
    req.set_slots(slots);
    auto resp = registry_->Register(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->epoch() : -1;
  }

  absl::Status Beat(const std::string& name, int64_t epoch) {
    v1::HeartbeatRequest req;
    req.set_name(name);
    req.set_epoch(epoch);
    return registry_->Heartbeat(req).status();
  }

  // The worker as stored, once queued writes are applied.
  WorkerRecord Stored(const std::string& name) {
    writer_->Flush();
    auto workers = store_->ListWorkers();
    EXPECT_TRUE(workers.ok()) << workers.status();
    for (const WorkerRecord& w : *workers) {
      if (w.name == name) return w;
    }
    ADD_FAILURE() << "worker " << name << " is not stored";
    return WorkerRecord();
  }

  FakeClock clock_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<StoreWriter> writer_;
  std::unique_ptr<WorkerRegistry> registry_;
};

TEST_F(WorkerRegistryTest, EachRegistrationStartsASessionWithTheNextEpoch) {
  v1::RegisterWorkerRequest req;
  req.set_name("a");
  req.set_slots(4);
  auto first = registry_->Register(req);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->epoch(), 1);
  EXPECT_EQ(first->heartbeat_interval_ms(), 500);
  auto second = registry_->Register(req);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->epoch(), 2);

  // Only the newest session is accepted.
  EXPECT_TRUE(absl::IsAborted(Beat("a", 1)));
  EXPECT_TRUE(Beat("a", 2).ok());
  EXPECT_TRUE(registry_->CheckSession("a", 2).ok());
  EXPECT_TRUE(absl::IsAborted(registry_->CheckSession("a", 1)));
}

TEST_F(WorkerRegistryTest, RegistrationWithOversizedLabelsIsInvalidArgument) {
  auto request = [](auto set) {
    v1::RegisterWorkerRequest req;
    req.set_name("w");
    req.set_slots(1);
    set(req);
    return req;
  };
  const v1::RegisterWorkerRequest bad[] = {
      request([](auto& r) { r.set_hostname(std::string(256, 'h')); }),
      request([](auto& r) { r.set_device_kind(std::string(33, 'd')); }),
      request([](auto& r) { r.set_pool(std::string(65, 'p')); }),
      request([](auto& r) { r.set_slurm_job_id(std::string(65, '1')); }),
  };
  for (const auto& req : bad) {
    absl::Status s = registry_->Register(req).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  }
  EXPECT_EQ(registry_->size(), 0u);
  const v1::RegisterWorkerRequest fine = request([](auto& r) {
    r.set_hostname(std::string(255, 'h'));
    r.set_pool("gpu");
    r.set_slurm_job_id("1234");
  });
  EXPECT_TRUE(registry_->Register(fine).ok());
}

TEST_F(WorkerRegistryTest, GpuIdsAreBoundedStoredListedAndKeptAcrossARestart) {
  auto request = [](std::vector<std::string> ids) {
    v1::RegisterWorkerRequest req;
    req.set_name("g");
    req.set_slots(2);
    req.set_device_kind("cuda");
    for (std::string& id : ids) req.add_gpu_ids(std::move(id));
    return req;
  };
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{std::string(97, 'G')}, std::vector<std::string>{"2,3"},
        std::vector<std::string>{""}, std::vector<std::string>{"GPU 1"},
        std::vector<std::string>(4097, "0")}) {
    const absl::Status s = registry_->Register(request(bad)).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("gpu_ids"));
  }
  EXPECT_EQ(registry_->size(), 0u);

  const std::string uuid = "GPU-8f2b3c1e-0d6a-4a43-9d1e-3b8f6a7c9e01";
  ASSERT_TRUE(registry_->Register(request({"3", uuid})).ok());
  const std::vector<v1::Worker> listed = registry_->List({});
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_THAT(listed[0].gpu_ids(), ElementsAre("3", uuid));
  EXPECT_THAT(Stored("g").gpu_ids, ElementsAre("3", uuid));

  // A new coordinator on the same store knows them before the worker
  // registers again.
  auto stored = store_->ListWorkers();
  ASSERT_TRUE(stored.ok());
  WorkerRegistry restarted(writer_.get(), &clock_, WorkerRegistryOptions());
  restarted.Recover(*stored);
  EXPECT_THAT(restarted.List({})[0].gpu_ids(), ElementsAre("3", uuid));
}

TEST_F(WorkerRegistryTest, GpuReadingsOfTheLatestHeartbeatAreKeptUntilANewSession) {
  v1::RegisterWorkerRequest reg;
  reg.set_name("g");
  reg.set_slots(2);
  reg.set_device_kind("cuda");
  reg.add_gpu_ids("0");
  reg.add_gpu_ids("1");
  auto registered = registry_->Register(reg);
  ASSERT_TRUE(registered.ok()) << registered.status();
  v1::HeartbeatRequest beat;
  beat.set_name("g");
  beat.set_epoch(registered->epoch());
  for (const char* id : {"1", "1", "9", "0"}) {
    v1::WorkerGpuReading* g = beat.add_gpus();
    g->set_gpu_id(id);
    g->set_utilization_percent(-3);
    g->set_power_watts(-1);
    g->set_temperature_celsius(55);
  }
  ASSERT_TRUE(registry_->Heartbeat(beat).ok());
  std::vector<GpuReading> gpus = registry_->Gpus("g");
  ASSERT_EQ(gpus.size(), 2u) << "GPU 9 is not the worker's; GPU 1 counts once";
  EXPECT_EQ(gpus[0].id, "1");
  EXPECT_EQ(gpus[1].id, "0");
  EXPECT_EQ(gpus[0].utilization_percent, 0);            // clamped
  EXPECT_FALSE(gpus[0].power_watts.has_value());        // refused
  EXPECT_FALSE(gpus[0].memory_used_bytes.has_value());  // not sent
  EXPECT_EQ(gpus[0].temperature_celsius, 55);

  beat.clear_gpus();  // NVML read nothing this time
  ASSERT_TRUE(registry_->Heartbeat(beat).ok());
  EXPECT_THAT(registry_->Gpus("g"), IsEmpty());
  beat.add_gpus()->set_gpu_id("0");
  ASSERT_TRUE(registry_->Heartbeat(beat).ok());
  EXPECT_EQ(registry_->Gpus("g").size(), 1u);
  ASSERT_TRUE(registry_->Register(reg).ok());
  EXPECT_THAT(registry_->Gpus("g"), IsEmpty()) << "a new session starts without";
  EXPECT_THAT(registry_->Gpus("unknown"), IsEmpty());
}

TEST_F(WorkerRegistryTest, RegistrationWithBadNameOrSlotsIsInvalidArgument) {
  v1::RegisterWorkerRequest req;
  req.set_slots(1);
  EXPECT_TRUE(absl::IsInvalidArgument(registry_->Register(req).status()));
  req.set_name(std::string(129, 'w'));
  EXPECT_TRUE(absl::IsInvalidArgument(registry_->Register(req).status()));
  req.set_name("w");
  req.set_slots(-1);
  EXPECT_TRUE(absl::IsInvalidArgument(registry_->Register(req).status()));
  req.set_slots(4097);
  EXPECT_TRUE(absl::IsInvalidArgument(registry_->Register(req).status()));
  EXPECT_EQ(registry_->size(), 0u);
}

TEST_F(WorkerRegistryTest, HeartbeatOfAWorkerNeverRegisteredIsNotFound) {
  EXPECT_TRUE(absl::IsNotFound(Beat("ghost", 1)));
  EXPECT_TRUE(absl::IsAborted(registry_->CheckSession("ghost", 1)));
  EXPECT_FALSE(registry_->Alive("ghost"));
}

TEST_F(WorkerRegistryTest, SilentWorkerIsSuspectButItsHeartbeatsAreStillAccepted) {
  const int64_t epoch = Register("a");
  EXPECT_TRUE(registry_->Alive("a"));
  clock_.Advance(absl::Seconds(3));
  EXPECT_TRUE(registry_->Alive("a")) << "silent for exactly suspect_after";
  clock_.Advance(absl::Seconds(1));
  EXPECT_FALSE(registry_->Alive("a"));
  EXPECT_THAT(registry_->Silent(), IsEmpty()) << "suspect is not dead";

  ASSERT_TRUE(Beat("a", epoch).ok());
  EXPECT_TRUE(registry_->Alive("a"));
}

TEST_F(WorkerRegistryTest, OnlyWorkersSilentPastDeadAfterAreSilent) {
  Register("a");
  const int64_t eb = Register("b");
  clock_.Advance(absl::Seconds(10));
  ASSERT_TRUE(Beat("b", eb).ok());
  clock_.Advance(absl::Seconds(5));
  EXPECT_THAT(registry_->Silent(), IsEmpty()) << "a silent for exactly dead_after";
  clock_.Advance(absl::Seconds(1));
  EXPECT_THAT(registry_->Silent(), ElementsAre("a"));
  clock_.Advance(absl::Seconds(10));
  EXPECT_THAT(registry_->Silent(), ElementsAre("a", "b"));
}

TEST_F(WorkerRegistryTest, DeclaredDeadWorkerIsFencedUntilItRegistersAgain) {
  const int64_t epoch = Register("a");
  clock_.Advance(absl::Seconds(16));
  ASSERT_THAT(registry_->Silent(), ElementsAre("a"));
  const std::string why = registry_->DeclareDead("a");
  EXPECT_EQ(why, "worker a declared dead (no heartbeat for 16s)");

  EXPECT_THAT(registry_->Silent(), IsEmpty()) << "declared dead once";
  EXPECT_FALSE(registry_->Alive("a"));
  EXPECT_TRUE(absl::IsAborted(Beat("a", epoch)));
  EXPECT_TRUE(absl::IsAborted(registry_->CheckSession("a", epoch)));
  // The fence is stored: a restarted coordinator refuses the old session too.
  EXPECT_EQ(Stored("a").epoch, epoch + 1);

  const int64_t again = Register("a");
  EXPECT_EQ(again, epoch + 2);
  EXPECT_TRUE(registry_->Alive("a"));
  EXPECT_TRUE(Beat("a", again).ok());
}

TEST_F(WorkerRegistryTest, DeadWorkerIsFencedEvenWhenItsEpochIsGuessed) {
  Register("a");
  clock_.Advance(absl::Seconds(16));
  registry_->DeclareDead("a");
  // The fenced epoch is refused as well: the worker must register again.
  EXPECT_TRUE(absl::IsAborted(Beat("a", 2)));
  EXPECT_TRUE(absl::IsAborted(registry_->CheckSession("a", 2)));
}

TEST_F(WorkerRegistryTest, RegistrationAndHeartbeatsAreStored) {
  Register("a", 3);
  WorkerRecord stored = Stored("a");
  EXPECT_EQ(stored.hostname, "a.example");
  EXPECT_EQ(stored.slots, 3);
  EXPECT_EQ(stored.device_kind, "cpu");
  EXPECT_EQ(stored.epoch, 1);
  EXPECT_EQ(stored.last_seen_unix_ms, absl::ToUnixMillis(clock_.Now()));

  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(Beat("a", 1).ok());
  EXPECT_EQ(Stored("a").last_seen_unix_ms, absl::ToUnixMillis(clock_.Now()));
}

TEST_F(WorkerRegistryTest, RecoveredWorkersGetAFullDeadAfterFromRecovery) {
  WorkerRecord old;
  old.name = "a";
  old.slots = 2;
  old.epoch = 7;
  old.last_seen_unix_ms = absl::ToUnixMillis(clock_.Now() - absl::Hours(1));
  registry_->Recover({old});

  EXPECT_TRUE(registry_->Alive("a"));
  EXPECT_THAT(registry_->Silent(), IsEmpty());
  EXPECT_TRUE(Beat("a", 7).ok()) << "the stored session goes on";
  clock_.Advance(absl::Seconds(16));
  EXPECT_THAT(registry_->Silent(), ElementsAre("a"));
}

TEST_F(WorkerRegistryTest, InventoryAndListShowSlotsUsedAndLiveness) {
  Register("a", 2);
  clock_.Advance(absl::Seconds(4));
  const int64_t eb = Register("b", 4);
  ASSERT_TRUE(Beat("b", eb).ok());
  const std::map<std::string, std::vector<int32_t>> used = {{"b", {1, 3}}};

  std::vector<WorkerInventory> inventory = registry_->Inventory(used);
  ASSERT_EQ(inventory.size(), 2u);
  EXPECT_EQ(inventory[0].worker, "a");
  EXPECT_EQ(inventory[0].slots, 2);
  EXPECT_THAT(inventory[0].used_slots, IsEmpty());
  EXPECT_FALSE(inventory[0].alive) << "a is suspect";
  EXPECT_EQ(inventory[1].worker, "b");
  EXPECT_THAT(inventory[1].used_slots, ElementsAre(1, 3));
  EXPECT_TRUE(inventory[1].alive);

  std::vector<v1::Worker> list = registry_->List(used);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name(), "a");
  EXPECT_EQ(list[0].slots_used(), 0);
  EXPECT_FALSE(list[0].alive());
  EXPECT_EQ(list[1].name(), "b");
  EXPECT_EQ(list[1].hostname(), "b.example");
  EXPECT_EQ(list[1].slots(), 4);
  EXPECT_EQ(list[1].slots_used(), 2);
  EXPECT_TRUE(list[1].alive());
  EXPECT_EQ(list[1].epoch(), eb);
  EXPECT_EQ(list[1].last_seen_unix_ms(), absl::ToUnixMillis(clock_.Now()));
}

// Reconciliation: what a heartbeat's report means against the beliefs.
class HeartbeatReportTest : public ::testing::Test {
 protected:
  static v1::LocalRank Rank(int64_t job, int32_t attempt, int32_t rank, int32_t pid,
                            bool exited = false) {
    v1::LocalRank r;
    r.set_job_id(job);
    r.set_attempt(attempt);
    r.set_rank(rank);
    r.set_pid(pid);
    r.set_exited(exited);
    return r;
  }
  static RankBelief Current(RankState state, int32_t pid = 0) {
    return RankBelief{.current = true, .state = state, .pid = pid};
  }

  v1::HeartbeatRequest request_;
};

TEST_F(HeartbeatReportTest, ListsRanksByAttemptAndByRankOfAnyAttempt) {
  request_.set_name("w");
  *request_.add_ranks() = Rank(7, 2, 1, 100);
  HeartbeatReport report(request_);
  EXPECT_EQ(report.worker(), "w");
  EXPECT_EQ(report.ranks().size(), 1);
  EXPECT_TRUE(report.Lists(7, 2, 1));
  EXPECT_FALSE(report.Lists(7, 3, 1));
  EXPECT_FALSE(report.Lists(7, 2, 0));
  EXPECT_TRUE(report.ListsRank(7, 1));
  EXPECT_FALSE(report.ListsRank(8, 1));
}

TEST_F(HeartbeatReportTest,
       RankThatIsNotCurrentIsStoppedWhileItRunsAndForgottenOnceExited) {
  HeartbeatReport report(request_);
  EXPECT_EQ(report.Reconcile(Rank(1, 1, 0, 100), RankBelief{}), RankVerdict::kStop);
  EXPECT_EQ(report.Reconcile(Rank(1, 1, 0, 100, /*exited=*/true), RankBelief{}),
            RankVerdict::kForget);
}

TEST_F(HeartbeatReportTest, ExitOfACurrentRankIsRecordedOnceThenOnlyAcknowledged) {
  HeartbeatReport report(request_);
  const v1::LocalRank exited = Rank(1, 1, 0, 100, /*exited=*/true);
  EXPECT_EQ(report.Reconcile(exited, Current(RankState::kRunning, 100)),
            RankVerdict::kRecordExit);
  EXPECT_EQ(report.Reconcile(exited, Current(RankState::kAssigned)),
            RankVerdict::kRecordExit)
      << "a rank that could not be launched exits without running";
  EXPECT_EQ(report.Reconcile(exited, Current(RankState::kExited, 100)),
            RankVerdict::kAcknowledgeExit);
}

TEST_F(HeartbeatReportTest, CurrentRankStartingOrWithANewPidIsRecordedRunning) {
  HeartbeatReport report(request_);
  const v1::LocalRank running = Rank(1, 1, 0, 100);
  EXPECT_EQ(report.Reconcile(running, Current(RankState::kAssigned)),
            RankVerdict::kRecordRunning);
  EXPECT_EQ(report.Reconcile(running, Current(RankState::kRunning, 99)),
            RankVerdict::kRecordRunning);
  EXPECT_EQ(report.Reconcile(running, Current(RankState::kRunning, 100)),
            RankVerdict::kNone);
}

TEST_F(HeartbeatReportTest, CurrentRankCountedAsExitedButStillRunningIsStopped) {
  HeartbeatReport report(request_);
  EXPECT_EQ(report.Reconcile(Rank(1, 1, 0, 100), Current(RankState::kExited, 100)),
            RankVerdict::kStop);
}

TEST_F(HeartbeatReportTest, UnlistedRankIsForgottenLostOrLeftAsItIs) {
  HeartbeatReport report(request_);
  EXPECT_EQ(report.ReconcileUnlisted(RankBelief{}), RankVerdict::kForget);
  // Not started yet: launched again.
  EXPECT_EQ(report.ReconcileUnlisted(Current(RankState::kAssigned)), RankVerdict::kNone);
  // Seen running, now missing: gone.
  EXPECT_EQ(report.ReconcileUnlisted(Current(RankState::kRunning, 100)),
            RankVerdict::kLost);
  EXPECT_EQ(report.ReconcileUnlisted(Current(RankState::kExited)), RankVerdict::kNone);
}

TEST_F(HeartbeatReportTest, RegistrationLosesTheRunningRanksItDoesNotList) {
  HeartbeatReport report(request_, /*registration=*/true);
  // Never seen running: launched again by the new session.
  EXPECT_EQ(report.ReconcileUnlisted(Current(RankState::kAssigned)), RankVerdict::kNone);
  EXPECT_EQ(report.ReconcileUnlisted(Current(RankState::kRunning, 100)),
            RankVerdict::kLost);
  EXPECT_EQ(report.ReconcileUnlisted(RankBelief{}), RankVerdict::kForget);
}

TEST_F(WorkerRegistryTest, AdminDrainIsStoredAndSurvivesACoordinatorRestart) {
  Register("a");
  Register("b");
  const absl::Time deadline = clock_.Now() + absl::Minutes(2);
  ASSERT_TRUE(registry_->Drain("a", "drain by root", deadline).ok());
  ASSERT_TRUE(registry_
                  ->Drain("b", "worker stopping", absl::InfiniteFuture(),
                          /*self=*/true)
                  .ok());
  EXPECT_EQ(Stored("a").admin_drain, "drain by root");
  EXPECT_EQ(Stored("a").admin_drain_deadline_unix_ms, absl::ToUnixMillis(deadline));
  EXPECT_EQ(Stored("b").admin_drain, "");  // the worker's own drain is not kept

  // A new coordinator on the same store.
  writer_->Flush();
  auto restarted =
      std::make_unique<WorkerRegistry>(writer_.get(), &clock_, WorkerRegistryOptions());
  auto stored = store_->ListWorkers();
  ASSERT_TRUE(stored.ok());
  restarted->Recover(*stored);
  EXPECT_TRUE(restarted->Draining("a"));
  EXPECT_EQ(restarted->DrainReason("a"), "drain by root");
  EXPECT_EQ(restarted->DrainDeadline("a"), deadline);
  EXPECT_FALSE(restarted->Draining("b"));

  ASSERT_TRUE(restarted->Undrain("a").ok());
  EXPECT_EQ(Stored("a").admin_drain, "");
  EXPECT_EQ(Stored("a").admin_drain_deadline_unix_ms, 0);
}

TEST_F(WorkerRegistryTest, DrainedWorkerGetsNoNewSlotsUntilUndrained) {
  Register("a");
  ASSERT_TRUE(registry_->Drain("a", "drain by root", absl::InfiniteFuture()).ok());
  EXPECT_TRUE(registry_->Draining("a"));
  EXPECT_FALSE(registry_->Inventory({})[0].alive);
  EXPECT_TRUE(registry_->List({})[0].drained());
  EXPECT_TRUE(absl::IsNotFound(registry_->Drain("zz", "x", absl::InfiniteFuture())));
  // An admin's drain outlives a restart of the worker.
  Register("a");
  EXPECT_TRUE(registry_->Draining("a"));
  ASSERT_TRUE(registry_->Undrain("a").ok());
  EXPECT_TRUE(registry_->Inventory({})[0].alive);
}

TEST_F(WorkerRegistryTest, AcceptedHeartbeatReturnsTheReportOfItsRanks) {
  const int64_t epoch = Register("a");
  v1::HeartbeatRequest req;
  req.set_name("a");
  req.set_epoch(epoch);
  v1::LocalRank* r = req.add_ranks();
  r->set_job_id(3);
  r->set_attempt(1);
  r->set_rank(0);
  auto report = registry_->Heartbeat(req);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->worker(), "a");
  EXPECT_TRUE(report->Lists(3, 1, 0));
}

}  // namespace
}  // namespace tessera
