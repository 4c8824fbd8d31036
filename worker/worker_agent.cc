#include "worker/worker_agent.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/common/grpc_status.h"
#include "coordinator/common/job_spec.h"
#include "grpcpp/client_context.h"
#include "spdlog/spdlog.h"

namespace tessera {

namespace {

void SetDeadline(grpc::ClientContext& ctx, absl::Duration timeout) {
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

RankKey KeyOf(int64_t job, int32_t attempt, int32_t rank) {
  return RankKey{job, attempt, rank};
}

}  // namespace

WorkerAgent::WorkerAgent(WorkerOptions options, std::shared_ptr<grpc::Channel> channel,
                         ProcessLauncher* launcher, CgroupTree* cgroups)
    : options_(std::move(options)),
      stub_(v1::WorkerService::NewStub(channel)),
      supervisor_(launcher, &clock_, options_.kill_grace, cgroups) {}

void WorkerAgent::Prepare(grpc::ClientContext& ctx) const {
  SetDeadline(ctx, options_.rpc_timeout);
  // Wait (up to the deadline) for the channel to reconnect instead of failing
  // at once on a connection that broke while the coordinator was away: a
  // restarted coordinator gives workers only worker_dead_after to come back.
  ctx.set_wait_for_ready(true);
  if (!options_.join_token.empty()) {
    ctx.AddMetadata("authorization", "Bearer " + options_.join_token);
  }
}

absl::Status WorkerAgent::Register() {
  v1::RegisterWorkerRequest request;
  request.set_name(options_.name);
  request.set_hostname(options_.hostname);
  request.set_slots(options_.gpus > 0 ? options_.gpus : options_.cpu_slots);
  request.set_device_kind(options_.gpus > 0 ? "cuda" : "cpu");
  v1::RegisterWorkerResponse response;
  grpc::ClientContext ctx;
  Prepare(ctx);
  absl::Status s = FromGrpcStatus(stub_->RegisterWorker(&ctx, request, &response));
  if (!s.ok()) return s;
  epoch_ = response.epoch();
  if (response.heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = absl::Milliseconds(response.heartbeat_interval_ms());
  }
  spdlog::info("registered with coordinator {} as {} ({} {} slots), epoch {}",
               options_.coordinator, options_.name, request.slots(),
               request.device_kind(), epoch_);
  return absl::OkStatus();
}

absl::Status WorkerAgent::HeartbeatOnce() {
  supervisor_.Poll();
  v1::HeartbeatRequest request;
  request.set_name(options_.name);
  request.set_epoch(epoch_);
  for (const RankProcess& p : supervisor_.Snapshot()) {
    v1::LocalRank* r = request.add_ranks();
    r->set_job_id(p.key.job_id);
    r->set_attempt(p.key.attempt);
    r->set_rank(p.key.rank);
    r->set_pid(p.pid);
    r->set_exited(p.exited);
    r->set_exit_code(p.exit.exit_code);
    r->set_signal(p.exit.signal);
  }
  v1::HeartbeatResponse response;
  grpc::ClientContext ctx;
  Prepare(ctx);
  absl::Status s = FromGrpcStatus(stub_->Heartbeat(&ctx, request, &response));
  if (!s.ok()) return s;
  for (const v1::KillOrder& k : response.acknowledged_exits()) {
    supervisor_.Forget(KeyOf(k.job_id(), k.attempt(), k.rank()));
  }
  for (const v1::KillOrder& k : response.kill()) {
    RankKey key = KeyOf(k.job_id(), k.attempt(), k.rank());
    if (supervisor_.Has(key)) {
      spdlog::info("stopping job {} attempt {} rank {} as ordered", k.job_id(),
                   k.attempt(), k.rank());
      supervisor_.Stop(key);
    }
  }
  for (const v1::LaunchOrder& order : response.launch()) Launch(order);
  ShipLogs();
  return absl::OkStatus();
}

void WorkerAgent::ShipLogs() {
  std::map<RankKey, bool> exited;
  for (const RankProcess& p : supervisor_.Snapshot()) exited[p.key] = p.exited;
  for (auto it = logs_.begin(); it != logs_.end();) {
    const RankKey& key = it->first;
    LogShipper& shipper = it->second;
    // A rank no longer supervised has exited and been acknowledged.
    auto e = exited.find(key);
    const bool done = e == exited.end() || e->second;
    std::string data;
    if (std::FILE* f = std::fopen(shipper.path.c_str(), "rb")) {
      if (std::fseek(f, shipper.offset, SEEK_SET) == 0) {
        data.resize(static_cast<size_t>(options_.log_chunk_bytes));
        data.resize(std::fread(data.data(), 1, data.size(), f));
      }
      std::fclose(f);
    }
    const bool eof = done && static_cast<int64_t>(data.size()) < options_.log_chunk_bytes;
    if (data.empty() && !eof) {
      ++it;
      continue;
    }
    v1::ShipLogsRequest request;
    request.set_name(options_.name);
    request.set_epoch(epoch_);
    request.set_job_id(key.job_id);
    request.set_attempt(key.attempt);
    request.set_rank(key.rank);
    request.set_offset(shipper.offset);
    request.set_data(std::move(data));
    request.set_eof(eof);
    v1::ShipLogsResponse response;
    grpc::ClientContext ctx;
    Prepare(ctx);
    absl::Status s = FromGrpcStatus(stub_->ShipLogs(&ctx, request, &response));
    if (!s.ok()) {
      // Kept for the next heartbeat; the file stays on disk meanwhile.
      spdlog::warn("shipping log of job {} rank {} failed: {}", key.job_id, key.rank,
                   s.ToString());
      return;
    }
    shipper.offset = response.next_offset();
    if (eof && shipper.offset >=
                   request.offset() + static_cast<int64_t>(request.data().size())) {
      it = logs_.erase(it);
    } else {
      ++it;
    }
  }
}

void WorkerAgent::Launch(const v1::LaunchOrder& order) {
  RankKey key = KeyOf(order.job_id(), order.attempt(), order.rank());
  if (supervisor_.Has(key)) return;  // a repeated order
  std::filesystem::path dir = std::filesystem::path(options_.work_dir) /
                              absl::StrCat("job-", order.job_id()) /
                              absl::StrCat("attempt-", order.attempt());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  ProcessSpec spec;
  spec.log_path = (dir / absl::StrCat("rank-", order.rank(), ".log")).string();
  spec.argv = {options_.trainer_path,
               absl::StrCat("--coordinator=", options_.coordinator),
               absl::StrCat("--job-id=", order.job_id()),
               absl::StrCat("--attempt=", order.attempt()),
               absl::StrCat("--rank=", order.rank()),
               absl::StrCat("--world-size=", order.world_size()),
               absl::StrCat("--local-rank=", order.local_rank())};
  if (!order.credential().empty()) {
    // argv is world-readable (/proc/PID/cmdline): the credential goes in a
    // file only this user can read, which the trainer removes once read.
    const std::string path =
        (dir / absl::StrCat("rank-", order.rank(), ".credential")).string();
    const int fd =
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    const std::string& cred = order.credential();
    if (fd < 0 || ::fchmod(fd, 0600) != 0 ||
        ::write(fd, cred.data(), cred.size()) != static_cast<ssize_t>(cred.size())) {
      ec = std::error_code(errno, std::generic_category());
    }
    if (fd >= 0) ::close(fd);
    spec.argv.push_back(absl::StrCat("--credential-file=", path));
  }
  for (std::string& flag : TrainerConfigToFlags(order.trainer())) {
    spec.argv.push_back(std::move(flag));
  }
  spec.env = {absl::StrCat("RANK=", order.rank()),
              absl::StrCat("WORLD_SIZE=", order.world_size()),
              absl::StrCat("LOCAL_RANK=", order.local_rank()),
              absl::StrCat("TESSERA_JOB_ID=", order.job_id()),
              absl::StrCat("TESSERA_ATTEMPT=", order.attempt())};
  if (options_.gpus > 0) {
    // Local rank i sees its GPU as cuda:i.
    std::vector<int32_t> gpus(order.local_slots().begin(), order.local_slots().end());
    if (gpus.empty()) gpus.push_back(order.slot());
    spec.env.push_back(absl::StrCat("CUDA_VISIBLE_DEVICES=", absl::StrJoin(gpus, ",")));
  } else {
    // Never let a CPU slot's rank pick up a GPU by accident.
    spec.env.push_back("CUDA_VISIBLE_DEVICES=");
  }
  absl::Status s = ec ? absl::InternalError(absl::StrCat("cannot create ", dir.string(),
                                                         ": ", ec.message()))
                      : supervisor_.Start(key, spec);
  logs_[key] = LogShipper{spec.log_path, 0};
  if (!s.ok()) {
    spdlog::error("job {} rank {}: launch failed: {}", order.job_id(), order.rank(),
                  s.ToString());
    return;
  }
  spdlog::info("launched job {} attempt {} rank {}/{} (slot {}), log {}", order.job_id(),
               order.attempt(), order.rank(), order.world_size(), order.slot(),
               spec.log_path);
}

void WorkerAgent::WaitFor(absl::Duration d) {
  const absl::Time until = absl::Now() + d;
  while (!stop_.HasBeenNotified()) {
    absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return;
    // Short slices, so a rank's exit is reported at once rather than a full
    // interval later.
    notifier_.Watchdog();
    if (stop_.WaitForNotificationWithTimeout(std::min(left, absl::Milliseconds(100))))
      return;
    if (supervisor_.Poll()) return;
  }
}

void WorkerAgent::Run() {
  // Ready means supervising; reaching the coordinator may take longer.
  notifier_.Ready("supervising ranks; coordinator " + options_.coordinator);
  absl::Duration backoff = options_.initial_backoff;
  int failures = 0;
  while (!stop_.HasBeenNotified()) {
    absl::Status s = epoch_ == 0 ? Register() : HeartbeatOnce();
    if (s.ok()) {
      if (failures > 0) {
        spdlog::info("coordinator {} reachable again after {} failed attempts",
                     options_.coordinator, failures);
      }
      failures = 0;
      backoff = options_.initial_backoff;
      WaitFor(heartbeat_interval_);
      continue;
    }
    if (absl::IsNotFound(s) || absl::IsAborted(s)) {
      spdlog::warn("coordinator dropped our session ({}); registering again",
                   std::string(s.message()));
      epoch_ = 0;
      continue;
    }
    ++failures;
    spdlog::warn(
        "coordinator {} unreachable ({}: {}); {} rank(s) keep running; retry {} in {}",
        options_.coordinator, absl::StatusCodeToString(s.code()),
        std::string(s.message()), supervisor_.running(), failures,
        absl::FormatDuration(backoff));
    WaitFor(backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
  notifier_.Stopping();
  if (supervisor_.running() > 0) {
    spdlog::info("stopping {} rank(s)", supervisor_.running());
    supervisor_.StopAll();
  }
  if (epoch_ != 0) {
    absl::Status s = HeartbeatOnce();  // report the exits; best effort
    if (!s.ok()) spdlog::warn("final heartbeat failed: {}", s.ToString());
  }
}

}  // namespace tessera
