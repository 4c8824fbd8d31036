#include "worker/worker_agent.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/grpc_status.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
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

// Appends `line` to a rank's log, so that the reason a rank did not start
// reaches its user through `tessctl logs` as well.
void AppendLine(const std::string& path, const std::string& line) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) return;
  const std::string text = line + "\n";
  ssize_t ignored = ::write(fd, text.data(), text.size());
  (void)ignored;
  ::close(fd);
}

// Writes `credential` to `dir`/credential, mode 0600, in a fresh directory of
// mode 0700; both belong to `owner` when set. Returns the file's path.
absl::StatusOr<std::string> WriteCredentialFile(const std::filesystem::path& dir,
                                                const std::string& credential,
                                                const std::optional<Account>& owner) {
  std::error_code ec;
  // Left over from an earlier worker run: it may hold whatever its owner put
  // there (remove_all does not follow symlinks).
  std::filesystem::remove_all(dir, ec);
  if (::mkdir(dir.c_str(), 0700) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot create ", dir.string(), ": ", std::strerror(errno)));
  }
  const std::string path = (dir / "credential").string();
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  bool ok =
      ::fchmod(fd, 0600) == 0 && ::write(fd, credential.data(), credential.size()) ==
                                     static_cast<ssize_t>(credential.size());
  if (ok && owner) ok = ::fchown(fd, owner->uid, owner->gid) == 0;
  const int saved = errno;
  ::close(fd);
  if (ok && owner && ::chown(dir.c_str(), owner->uid, owner->gid) != 0) ok = false;
  if (!ok) {
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ",
                                            std::strerror(saved != 0 ? saved : errno)));
  }
  return path;
}

bool IsUnder(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root || (path.size() > root.size() && path.starts_with(root) &&
                          path[root.size()] == '/');
}

}  // namespace

absl::StatusOr<std::string> ResolvePath(const std::string& path) {
  if (path.empty() || path.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not an absolute path"));
  }
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == "..") {
      return absl::InvalidArgumentError(absl::StrCat("'", path, "' contains '..'"));
    }
    if (part != ".") parts.emplace_back(part);
  }
  // The longest prefix that exists (as any kind of entry: a dangling symlink
  // exists too, and must not be taken for a name still to be created).
  size_t existing = parts.size();
  std::string prefix;
  for (;; --existing) {
    prefix = "/" + absl::StrJoin(parts.begin(), parts.begin() + existing, "/");
    struct stat st;
    if (::lstat(prefix.c_str(), &st) == 0) break;
    if (errno != ENOENT && errno != ENOTDIR) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot inspect ", prefix, ": ", std::strerror(errno)));
    }
    if (existing == 0) break;
  }
  char resolved[PATH_MAX];
  if (::realpath(prefix.c_str(), resolved) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot resolve ", prefix, ": ", std::strerror(errno)));
  }
  std::string out = resolved;
  for (size_t i = existing; i < parts.size(); ++i) {
    if (out.back() != '/') out += '/';
    out += parts[i];
  }
  return out;
}

absl::StatusOr<std::string> ResolveUnderRoots(const std::string& what,
                                              const std::string& path,
                                              const std::vector<std::string>& roots) {
  absl::StatusOr<std::string> resolved = ResolvePath(path);
  if (!resolved.ok()) {
    return absl::Status(resolved.status().code(),
                        absl::StrCat(what, ": ", resolved.status().message()));
  }
  for (const std::string& root : roots) {
    absl::StatusOr<std::string> real_root = ResolvePath(root);
    if (real_root.ok() && IsUnder(*resolved, *real_root)) return resolved;
  }
  std::string shown = *resolved == path ? path : absl::StrCat(path, " (", *resolved, ")");
  return absl::PermissionDeniedError(
      absl::StrCat(what, " ", shown, " is outside the allowed roots [",
                   absl::StrJoin(roots, ", "), "] of this worker"));
}

absl::StatusOr<v1::TrainerConfig> CheckTrainerPaths(const WorkerOptions& options,
                                                    const v1::TrainerConfig& config) {
  v1::TrainerConfig checked = config;
  // The trainer gets the resolved paths: a symlink swapped after this check
  // does not move it elsewhere.
  if (!config.data_dir().empty()) {
    ASSIGN_OR_RETURN(std::string dir, ResolveUnderRoots("data_dir", config.data_dir(),
                                                        options.data_roots));
    checked.set_data_dir(dir);
  }
  if (!config.checkpoint_dir().empty()) {
    ASSIGN_OR_RETURN(std::string dir,
                     ResolveUnderRoots("checkpoint_dir", config.checkpoint_dir(),
                                       options.checkpoint_roots));
    checked.set_checkpoint_dir(dir);
  }
  return checked;
}

absl::StatusOr<std::optional<Account>> AccountForRank(const WorkerOptions& options,
                                                      const std::string& owner,
                                                      bool worker_is_root) {
  if (!worker_is_root) return std::nullopt;  // it cannot be anyone else
  const std::string& name = owner.empty() ? options.job_user : owner;
  if (name.empty()) {
    if (options.allow_root_jobs) return std::nullopt;
    return absl::PermissionDeniedError(absl::StrCat(
        "the job has no owner and worker ", options.name,
        " runs as root: it does not run jobs as root without --allow-root-jobs "
        "(or set --job-user for jobs without an owner)"));
  }
  absl::StatusOr<Account> account = LookUpAccount(name);
  if (absl::IsNotFound(account.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat("user ", name, " has no account on worker ", options.name));
  }
  if (!account.ok()) return account.status();
  if (account->uid == 0) {
    if (options.allow_root_jobs) return std::nullopt;
    return absl::PermissionDeniedError(
        absl::StrCat("user ", name, " is root (uid 0) on worker ", options.name,
                     ", which does not run jobs as root without --allow-root-jobs"));
  }
  return *std::move(account);
}

absl::StatusOr<std::vector<std::string>> RankEnv(const v1::LaunchOrder& order) {
  std::vector<std::string> out;
  // Sorted, for a stable environment and messages.
  std::map<std::string, std::string> env(order.env().begin(), order.env().end());
  if (env.size() > static_cast<size_t>(kMaxEnvEntries)) {
    return absl::InvalidArgumentError(
        absl::StrCat("env: ", env.size(), " entries, limit ", kMaxEnvEntries));
  }
  for (const auto& [name, value] : env) {
    RETURN_IF_ERROR(CheckEnvName(name));
    if (value.size() > kMaxEnvValueBytes || value.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("env.", name, ": value too long or holds a NUL byte"));
    }
    out.push_back(absl::StrCat(name, "=", value));
  }
  return out;
}

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
    r->set_launch_error(p.launch_error);
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
  // Who the rank runs as, what it may read and write, its environment: a rank
  // that fails these checks never starts, and its log and the coordinator say why.
  absl::StatusOr<std::optional<Account>> account =
      AccountForRank(options_, order.run_as(), ::geteuid() == 0);
  absl::StatusOr<v1::TrainerConfig> trainer =
      CheckTrainerPaths(options_, order.trainer());
  absl::StatusOr<std::vector<std::string>> rank_env = RankEnv(order);
  absl::Status refused;
  if (ec) {
    refused = absl::InternalError(
        absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  }
  for (const absl::Status& s : {account.status(), trainer.status(), rank_env.status()}) {
    if (refused.ok()) refused = s;
  }
  if (!refused.ok()) {
    const std::string why(refused.message());
    AppendLine(spec.log_path, absl::StrCat("tessera-worker: rank not launched: ", why));
    supervisor_.Refuse(key, why);
    logs_[key] = LogShipper{spec.log_path, 0};
    spdlog::error("job {} attempt {} rank {}: not launched: {}", order.job_id(),
                  order.attempt(), order.rank(), why);
    return;
  }
  spec.run_as = *account;
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
    // It lies in a directory of its own that belongs to the rank's account,
    // so that the trainer can remove it; the attempt's directory stays the
    // worker's.
    absl::StatusOr<std::string> path =
        WriteCredentialFile(dir / absl::StrCat("rank-", order.rank(), ".private"),
                            order.credential(), spec.run_as);
    if (path.ok()) {
      spec.argv.push_back(absl::StrCat("--credential-file=", *path));
    } else {
      ec = std::error_code(EIO, std::generic_category());
      spdlog::error("job {} rank {}: {}", order.job_id(), order.rank(),
                    path.status().ToString());
    }
  }
  for (std::string& flag : TrainerConfigToFlags(*trainer)) {
    spec.argv.push_back(std::move(flag));
  }
  spec.env = {absl::StrCat("RANK=", order.rank()),
              absl::StrCat("WORLD_SIZE=", order.world_size()),
              absl::StrCat("LOCAL_RANK=", order.local_rank()),
              absl::StrCat("TESSERA_JOB_ID=", order.job_id()),
              absl::StrCat("TESSERA_ATTEMPT=", order.attempt())};
  if (!options_.tls_ca_file.empty()) {
    // The trainer's channel trusts what the worker's does (see trainer/main.cc).
    spec.env.push_back(absl::StrCat("TESSERA_TRAINER_TLS_CA=", options_.tls_ca_file));
    spec.env.push_back(
        absl::StrCat("TESSERA_TRAINER_TLS_SERVER_NAME=", options_.tls_server_name));
  }
  if (options_.gpus > 0) {
    // Local rank i sees its GPU as cuda:i.
    std::vector<int32_t> gpus(order.local_slots().begin(), order.local_slots().end());
    if (gpus.empty()) gpus.push_back(order.slot());
    spec.env.push_back(absl::StrCat("CUDA_VISIBLE_DEVICES=", absl::StrJoin(gpus, ",")));
  } else {
    // Never let a CPU slot's rank pick up a GPU by accident.
    spec.env.push_back("CUDA_VISIBLE_DEVICES=");
  }
  for (std::string& entry : *rank_env) spec.env.push_back(std::move(entry));
  absl::Status s;
  if (ec) {
    s = absl::InternalError(absl::StrCat("cannot write the credential file of rank ",
                                         order.rank(), " under ", dir.string()));
    supervisor_.Refuse(key, std::string(s.message()));
  } else {
    s = supervisor_.Start(key, spec);
  }
  if (!s.ok()) {
    AppendLine(spec.log_path,
               absl::StrCat("tessera-worker: rank not launched: ", s.message()));
  }
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
