#include "worker/worker_agent.h"

#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/grpc_status.h"
#include "common/job_spec.h"
#include "common/retry.h"
#include "common/status_macros.h"
#include "common/trainer_exit.h"
#include "grpcpp/client_context.h"
#include "spdlog/spdlog.h"
#include "worker/credential_file.h"
#include "worker/device_probe.h"
#include "worker/work_dir.h"

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

// NVML for the GPUs this worker owns; null on a CPU worker, and where NVML
// cannot be loaded: then heartbeats carry no GPU readings, which is normal on
// a node without the driver and not worth a warning.
std::unique_ptr<GpuMonitor> OpenGpuMonitor(const WorkerOptions& options) {
  if (options.gpu_ids.empty()) return nullptr;
  absl::StatusOr<std::unique_ptr<GpuMonitor>> nvml = OpenNvml(options.nvml_library);
  if (!nvml.ok()) {
    spdlog::info("heartbeats carry no GPU readings: {}",
                 std::string(nvml.status().message()));
    return nullptr;
  }
  return *std::move(nvml);
}

// One reading per GPU of `ids` that NVML knows; one it cannot read is left
// out of this heartbeat (and off /metrics until it reads again).
void AddGpuReadings(GpuMonitor& monitor, const std::vector<std::string>& ids,
                    google::protobuf::RepeatedPtrField<v1::WorkerGpuReading>* out) {
  for (const std::string& id : ids) {
    absl::StatusOr<GpuReading> reading = monitor.Read(id);
    if (!reading.ok()) continue;
    v1::WorkerGpuReading* g = out->Add();
    g->set_gpu_id(id);
    if (reading->utilization_percent) {
      g->set_utilization_percent(*reading->utilization_percent);
    }
    if (reading->memory_used_bytes) g->set_memory_used_bytes(*reading->memory_used_bytes);
    if (reading->memory_total_bytes) {
      g->set_memory_total_bytes(*reading->memory_total_bytes);
    }
    if (reading->temperature_celsius) {
      g->set_temperature_celsius(*reading->temperature_celsius);
    }
    if (reading->power_watts) g->set_power_watts(*reading->power_watts);
  }
}

// A rank's CUDA_VISIBLE_DEVICES: the owned GPUs of its job's slots on this
// worker, so that local rank i sees its own GPU as cuda:i and never one that
// is not the worker's. On a CPU worker none at all, so that a CPU slot's rank
// never picks up a GPU by accident.
absl::StatusOr<std::string> VisibleDevices(const WorkerOptions& options,
                                           const v1::LaunchOrder& order) {
  if (options.gpu_ids.empty()) return std::string();
  std::vector<int32_t> slots(order.local_slots().begin(), order.local_slots().end());
  if (slots.empty()) slots.push_back(order.slot());
  return RankVisibleDevices(options.gpu_ids, slots);
}

// The variables the worker sets for a rank (RankEnvironment's `tessera`).
std::vector<std::string> TesseraEnv(const WorkerOptions& options,
                                    const v1::LaunchOrder& order,
                                    const std::string& visible_devices) {
  std::vector<std::string> env = {absl::StrCat("RANK=", order.rank()),
                                  absl::StrCat("WORLD_SIZE=", order.world_size()),
                                  absl::StrCat("LOCAL_RANK=", order.local_rank()),
                                  absl::StrCat("TESSERA_JOB_ID=", order.job_id()),
                                  absl::StrCat("TESSERA_ATTEMPT=", order.attempt()),
                                  "CUDA_VISIBLE_DEVICES=" + visible_devices};
  if (!options.tls_ca_file.empty()) {
    // The trainer's channel trusts what the worker's does (see trainer/main.cc).
    env.push_back(absl::StrCat("TESSERA_TRAINER_TLS_CA=", options.tls_ca_file));
    env.push_back(
        absl::StrCat("TESSERA_TRAINER_TLS_SERVER_NAME=", options.tls_server_name));
  }
  return env;
}

// The trainer's argv up to its credential and TrainerConfig flags.
std::vector<std::string> TrainerArgv(const WorkerOptions& options,
                                     const v1::LaunchOrder& order) {
  return {options.trainer_path,
          absl::StrCat("--coordinator=", options.coordinator),
          absl::StrCat("--job-id=", order.job_id()),
          absl::StrCat("--attempt=", order.attempt()),
          absl::StrCat("--rank=", order.rank()),
          absl::StrCat("--world-size=", order.world_size()),
          absl::StrCat("--local-rank=", order.local_rank())};
}

// Writes the rank's credential under the attempt's directory `dir` (open as
// `dir_fd`) and returns the trainer's --credential-file flag. argv is
// world-readable (/proc/PID/cmdline): the credential goes in a file only this
// user can read, which the trainer removes once read. It lies in a directory
// of its own that belongs to the rank's account, so that the trainer can
// remove it; the attempt's directory stays the worker's.
absl::StatusOr<std::string> WriteRankCredential(
    int dir_fd, const std::string& dir, const v1::LaunchOrder& order,
    const std::optional<UnixAccount>& run_as) {
  const std::string private_dir = absl::StrCat("rank-", order.rank(), ".private");
  if (absl::Status s = WriteCredentialAt(dir_fd, private_dir, order.credential(), run_as);
      !s.ok()) {
    return absl::InternalError(absl::StrCat("cannot write the credential file of rank ",
                                            order.rank(), " under ", dir, ": ",
                                            s.message()));
  }
  return absl::StrCat("--credential-file=", dir, "/", private_dir, "/credential");
}

// The flags naming the rank's own files under the attempt's directory `dir`
// (open as `dir_fd`): its credential, and with trainer.profile_steps the
// folder rank-N.profile (the rank's own) for its step profile.
absl::StatusOr<std::vector<std::string>> RankFileFlags(
    int dir_fd, const std::string& dir, const v1::LaunchOrder& order,
    const v1::TrainerConfig& trainer, const std::optional<UnixAccount>& run_as) {
  std::vector<std::string> flags;
  if (!order.credential().empty()) {
    ASSIGN_OR_RETURN(std::string flag, WriteRankCredential(dir_fd, dir, order, run_as));
    flags.push_back(std::move(flag));
  }
  if (!trainer.profile_steps().empty()) {
    const std::string name = absl::StrCat("rank-", order.rank(), ".profile");
    if (absl::Status s = MakeRankDirAt(dir_fd, name, run_as); !s.ok()) {
      return absl::InternalError(absl::StrCat("cannot make the profile folder of rank ",
                                              order.rank(), " under ", dir, ": ",
                                              s.message()));
    }
    flags.push_back(absl::StrCat("--profile-dir=", dir, "/", name));
  }
  return flags;
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
  if (!config.init_from().empty()) {
    // Pretrained weights are data: read from the same roots.
    ASSIGN_OR_RETURN(std::string file, ResolveUnderRoots("init_from", config.init_from(),
                                                         options.data_roots));
    checked.set_init_from(file);
  }
  return checked;
}

absl::StatusOr<std::optional<UnixAccount>> AccountForRank(const WorkerOptions& options,
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
  absl::StatusOr<UnixAccount> account = LookUpUnixAccount(name);
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

std::vector<std::string> RankEnvironment(
    const WorkerOptions& options, const UnixAccount& account,
    const std::vector<std::string>& tessera, const std::vector<std::string>& spec,
    const std::function<const char*(const char*)>& lookup) {
  std::map<std::string, std::string> env;  // name -> "NAME=value"
  const auto set = [&env](const std::string& entry) {
    env[entry.substr(0, entry.find('='))] = entry;
  };
  set(absl::StrCat("PATH=", kRankPath));
  set("HOME=" + account.home);
  set("USER=" + account.name);
  set("LOGNAME=" + account.name);
  // The operator's choices, as the worker has them.
  std::vector<std::string> passed = {"LANG", "LC_ALL", "TZ"};
  passed.insert(passed.end(), options.pass_env.begin(), options.pass_env.end());
  for (const std::string& name : passed) {
    if (const char* value = lookup(name.c_str()); value != nullptr) {
      set(absl::StrCat(name, "=", value));
    }
  }
  for (const std::string& entry : tessera) set(entry);
  for (const std::string& entry : spec) set(entry);
  std::vector<std::string> out;
  out.reserve(env.size());
  for (auto& [name, entry] : env) out.push_back(std::move(entry));
  return out;
}

UnixAccount WorkerAccount() {
  UnixAccount account;
  account.uid = ::geteuid();
  account.gid = ::getegid();
  account.name = absl::StrCat(account.uid);
  account.home = "/";
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size > 0 ? static_cast<size_t>(size) : 16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(account.uid, &pw, buf.data(), buf.size(), &found) == 0 &&
      found != nullptr) {
    account.name = pw.pw_name;
    if (pw.pw_dir != nullptr) account.home = pw.pw_dir;
  }
  return account;
}

WorkerAgent::WorkerAgent(WorkerOptions options, std::shared_ptr<grpc::Channel> channel,
                         ProcessLauncher* launcher, CgroupTree* cgroups)
    : options_(std::move(options)),
      stub_(v1::WorkerService::NewStub(channel)),
      supervisor_(launcher, &clock_, options_.kill_grace, cgroups),
      gpus_(OpenGpuMonitor(options_)) {}

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
  const bool gpu = !options_.gpu_ids.empty();
  request.set_slots(gpu ? static_cast<int32_t>(options_.gpu_ids.size())
                        : options_.cpu_slots);
  request.set_device_kind(gpu ? "cuda" : "cpu");
  for (const std::string& id : options_.gpu_ids) request.add_gpu_ids(id);
  request.set_worker_credential(credential_);
  request.set_pool(options_.pool);
  request.set_slurm_job_id(options_.slurm_job_id);
  supervisor_.Poll();
  AddLocalRanks(request.mutable_ranks());
  v1::RegisterWorkerResponse response;
  grpc::ClientContext ctx;
  Prepare(ctx);
  absl::Status s = FromGrpcStatus(stub_->RegisterWorker(&ctx, request, &response));
  if (!s.ok()) return s;
  if (!response.worker_credential().empty()) {
    credential_ = response.worker_credential();
    if (options_.state_dir.empty()) {
      spdlog::info("the coordinator issued this worker its credential (kept in memory)");
    } else if (absl::Status saved =
                   SaveWorkerCredential(options_.state_dir, options_.name, credential_);
               saved.ok()) {
      spdlog::info("the coordinator issued this worker its credential; kept in {}/{}",
                   options_.state_dir, WorkerCredentialFileName(options_.name));
    } else {
      // Still good for this run; after a restart the name is free again only
      // once the coordinator has declared this worker dead.
      spdlog::error("cannot keep this worker's credential: {}", saved.ToString());
    }
  }
  epoch_ = response.epoch();
  if (response.heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = absl::Milliseconds(response.heartbeat_interval_ms());
  }
  spdlog::info(
      "registered with coordinator {} as {} ({} {} slots{}{}{}), epoch {}{}",
      options_.coordinator, options_.name, request.slots(), request.device_kind(),
      gpu ? ", GPUs " + absl::StrJoin(options_.gpu_ids, ",") : "",
      options_.pool.empty() ? "" : ", pool " + options_.pool,
      options_.slurm_job_id.empty() ? "" : ", Slurm job " + options_.slurm_job_id, epoch_,
      request.ranks_size() == 0
          ? ""
          : absl::StrCat("; listed ", request.ranks_size(), " rank(s) of ours"));
  return absl::OkStatus();
}

void WorkerAgent::AddLocalRanks(google::protobuf::RepeatedPtrField<v1::LocalRank>* out) {
  for (const RankProcess& p : supervisor_.Snapshot()) {
    v1::LocalRank* r = out->Add();
    r->set_job_id(p.key.job_id);
    r->set_attempt(p.key.attempt);
    r->set_rank(p.key.rank);
    r->set_pid(p.pid);
    r->set_exited(p.exited);
    r->set_exit_code(p.exit.exit_code);
    r->set_signal(p.exit.signal);
    r->set_launch_error(p.launch_error);
    r->set_exit_detail(p.exit_detail);
  }
}

absl::Status WorkerAgent::HeartbeatOnce() {
  supervisor_.Poll();
  v1::HeartbeatRequest request;
  request.set_name(options_.name);
  request.set_epoch(epoch_);
  request.set_worker_credential(credential_);
  request.set_draining(draining_);
  AddLocalRanks(request.mutable_ranks());
  if (gpus_ != nullptr) AddGpuReadings(*gpus_, options_.gpu_ids, request.mutable_gpus());
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
  for (const v1::KillOrder& k : response.preempt()) {
    // Once per rank: a repeated order finds it already asked.
    if (supervisor_.Preempt(KeyOf(k.job_id(), k.attempt(), k.rank()))) {
      spdlog::info(
          "asked job {} attempt {} rank {} to checkpoint and exit (SIGUSR1) as "
          "ordered",
          k.job_id(), k.attempt(), k.rank());
    }
  }
  for (const v1::LaunchOrder& order : response.launch()) {
    const RankKey key = KeyOf(order.job_id(), order.attempt(), order.rank());
    if (draining_ && !supervisor_.Has(key)) {
      // Ordered before the coordinator heard that this worker drains: the
      // rank leaves before it starts, as a preempted one does.
      supervisor_.Refuse(key, absl::StrCat("worker ", options_.name, " is draining"),
                         kTrainerExitPreempted);
      spdlog::warn("job {} attempt {} rank {}: not launched, this worker is draining",
                   order.job_id(), order.attempt(), order.rank());
      continue;
    }
    Launch(order);
  }
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
    request.set_worker_credential(credential_);
    v1::ShipLogsResponse response;
    grpc::ClientContext ctx;
    Prepare(ctx);
    absl::Status s = FromGrpcStatus(stub_->ShipLogs(&ctx, request, &response));
    if (absl::IsPermissionDenied(s) || absl::IsInvalidArgument(s)) {
      // Refused for good (not a rank of this worker's, as far as the
      // coordinator knows): retrying would not change that.
      spdlog::error("the coordinator refused the log of job {} attempt {} rank {}: {}",
                    key.job_id, key.attempt, key.rank, s.ToString());
      it = logs_.erase(it);
      continue;
    }
    if (absl::IsResourceExhausted(s)) {
      // The job's log limit on the coordinator: the rest stays in the file.
      spdlog::warn(
          "job {} rank {}: the coordinator stores no more of this log ({}); "
          "the rest stays in {}",
          key.job_id, key.rank, std::string(s.message()), shipper.path);
      it = logs_.erase(it);
      continue;
    }
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
  // The attempt's directory, walked from the work dir's descriptor without
  // following a symlink. When that fails, nothing is written under it (not
  // even the log line saying why): the coordinator hears the reason.
  absl::StatusOr<ScopedFd> attempt_dir =
      OpenAttemptDir(options_.work_dir, order.job_id(), order.attempt());
  if (!attempt_dir.ok()) {
    const std::string why(attempt_dir.status().message());
    supervisor_.Refuse(key, why);
    spdlog::error("job {} attempt {} rank {}: not launched: {}", order.job_id(),
                  order.attempt(), order.rank(), why);
    return;
  }
  const std::string dir = absl::StrCat(options_.work_dir, "/job-", order.job_id(),
                                       "/attempt-", order.attempt());
  ProcessSpec spec;
  spec.log_path = absl::StrCat(dir, "/rank-", order.rank(), ".log");
  // Who the rank runs as, what it may read and write, its environment: a rank
  // that fails these checks never starts, and its log and the coordinator say why.
  absl::StatusOr<std::optional<UnixAccount>> account =
      AccountForRank(options_, order.run_as(), ::geteuid() == 0);
  absl::StatusOr<v1::TrainerConfig> trainer =
      CheckTrainerPaths(options_, order.trainer());
  absl::StatusOr<std::vector<std::string>> rank_env = RankEnv(order);
  absl::StatusOr<std::string> visible = VisibleDevices(options_, order);
  absl::Status refused;
  for (const absl::Status& s :
       {account.status(), trainer.status(), rank_env.status(), visible.status()}) {
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
  spec.memory_limit_bytes = order.memory_per_rank_bytes();
  spec.argv = TrainerArgv(options_, order);
  absl::StatusOr<std::vector<std::string>> file_flags =
      RankFileFlags(attempt_dir->get(), dir, order, *trainer, spec.run_as);
  absl::Status s = file_flags.status();
  if (s.ok()) {
    for (std::string& flag : *file_flags) spec.argv.push_back(std::move(flag));
  }
  for (std::string& flag : TrainerConfigToFlags(*trainer)) {
    spec.argv.push_back(std::move(flag));
  }
  spec.env = RankEnvironment(options_, spec.run_as ? *spec.run_as : WorkerAccount(),
                             TesseraEnv(options_, order, *visible), *rank_env, ::getenv);
  if (s.ok()) {
    s = supervisor_.Start(key, spec);
  } else {
    supervisor_.Refuse(key, std::string(s.message()));
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
  spdlog::info("launched job {} attempt {} rank {}/{} (slot {}{}), log {}",
               order.job_id(), order.attempt(), order.rank(), order.world_size(),
               order.slot(), visible->empty() ? "" : ", GPUs " + *visible, spec.log_path);
}

void WorkerAgent::Stop() {
  absl::MutexLock lock(&mu_);
  stop_requested_ = true;
}

void WorkerAgent::Drain() {
  absl::MutexLock lock(&mu_);
  if (drain_requested_ || options_.drain_timeout <= absl::ZeroDuration()) {
    stop_requested_ = true;
    return;
  }
  drain_requested_ = true;
  drain_pending_ = true;
}

void WorkerAgent::Preempt() {
  absl::MutexLock lock(&mu_);
  preempt_pending_ = true;
}

bool WorkerAgent::HasRequest() const {
  return stop_requested_ || drain_pending_ || preempt_pending_;
}

bool WorkerAgent::HandleRequests() {
  bool drain = false;
  bool preempt = false;
  {
    absl::MutexLock lock(&mu_);
    if (stop_requested_) return false;
    drain = std::exchange(drain_pending_, false);
    preempt = std::exchange(preempt_pending_, false);
  }
  if (!drain && !preempt) return true;
  draining_ = true;
  supervisor_.Poll();
  int asked = 0;
  for (const RankProcess& p : supervisor_.Snapshot()) {
    if (supervisor_.Preempt(p.key)) ++asked;
  }
  const int running = supervisor_.running();
  if (drain) {
    drain_deadline_ = absl::Now() + options_.drain_timeout;
    const std::string line = absl::StrCat(
        "draining: asked ", asked, " rank(s) to checkpoint and exit; waiting up to ",
        absl::ToDoubleSeconds(options_.drain_timeout), "s for the ", running,
        " running to exit and the coordinator to acknowledge");
    spdlog::info("{}", line);
    notifier_.Stopping();
    notifier_.Status(line);
  } else {
    const std::string line =
        absl::StrCat("preemption notice: asked ", asked,
                     " rank(s) to checkpoint and exit (SIGUSR1); taking no new ranks");
    spdlog::info("{}", line);
    notifier_.Status(line);
  }
  return true;
}

void WorkerAgent::WaitFor(absl::Duration d) {
  const absl::Time until = absl::Now() + d;
  while (true) {
    absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return;
    // Short slices, so a rank's exit is reported at once rather than a full
    // interval later.
    notifier_.Watchdog();
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(this, &WorkerAgent::HasRequest),
                               std::min(left, absl::Milliseconds(100)))) {
        return;
      }
    }
    if (supervisor_.Poll()) return;
  }
}

void WorkerAgent::ReportFinalExits() {
  if (epoch_ == 0) return;
  const absl::Time until = absl::Now() + options_.rpc_timeout;
  while (true) {
    absl::Status s = HeartbeatOnce();
    if (!s.ok()) {
      spdlog::warn("final heartbeat failed: {}", s.ToString());
      return;
    }
    if (supervisor_.Snapshot().empty()) return;
    if (absl::Now() >= until) {
      spdlog::warn("the coordinator has not acknowledged the exit of {} rank(s)",
                   supervisor_.Snapshot().size());
      return;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

WorkerAgent::Refusal WorkerAgent::Classify(const absl::Status& s) {
  if (epoch_ != 0 &&
      (absl::IsNotFound(s) || absl::IsAborted(s) || absl::IsPermissionDenied(s))) {
    spdlog::warn("coordinator dropped our session ({}); registering again",
                 std::string(s.message()));
    epoch_ = 0;
    return Refusal::kRegisterAgain;
  }
  if (absl::IsUnauthenticated(s) && !options_.slurm_job_id.empty()) {
    spdlog::error(
        "the coordinator refused this worker's join credential ({}); as a worker of "
        "Slurm allocation {} it stops, so that the allocation ends",
        std::string(s.message()), options_.slurm_job_id);
    refused_ = true;
    return Refusal::kStop;
  }
  if (epoch_ == 0 && absl::IsPermissionDenied(s)) {
    // Another worker holds this name (or this one lost its credential):
    // the name is free again once the coordinator declares that one dead.
    spdlog::error("coordinator refused the registration: {}", std::string(s.message()));
  }
  return Refusal::kRetry;
}

void WorkerAgent::Run() {
  // Ready means supervising; reaching the coordinator may take longer.
  notifier_.Ready("supervising ranks; coordinator " + options_.coordinator);
  if (!options_.state_dir.empty()) {
    absl::StatusOr<std::string> kept =
        LoadWorkerCredential(options_.state_dir, options_.name);
    if (kept.ok()) {
      credential_ = *kept;
    } else {
      spdlog::error("cannot read this worker's credential: {}", kept.status().ToString());
    }
  }
  // Jittered, so that the workers of a cluster do not all call a restarted
  // coordinator at once; no deadline: the agent never gives up.
  Backoff backoff(
      {.initial_delay = options_.initial_backoff, .max_delay = options_.max_backoff},
      clock_);
  int failures = 0;
  // How long to wait at most: up to `d`, or the end of a drain.
  const auto capped = [this](absl::Duration d) {
    return drain_deadline_ ? std::min(d, *drain_deadline_ - absl::Now()) : d;
  };
  while (HandleRequests()) {
    if (drain_deadline_) {
      if (Drained()) {
        spdlog::info("drained: every rank exited and the coordinator has its exits");
        break;
      }
      if (absl::Now() >= *drain_deadline_) {
        spdlog::warn(
            "drain timeout ({}s) passed with {} rank(s) still running and {} exit(s) not "
            "acknowledged; stopping",
            absl::ToDoubleSeconds(options_.drain_timeout), supervisor_.running(),
            supervisor_.Snapshot().size() - supervisor_.running());
        break;
      }
    }
    absl::Status s = epoch_ == 0 ? Register() : HeartbeatOnce();
    if (s.ok()) {
      if (failures > 0) {
        spdlog::info("coordinator {} reachable again after {} failed attempts",
                     options_.coordinator, failures);
      }
      failures = 0;
      backoff.Reset();
      if (drain_deadline_ && Drained()) continue;
      WaitFor(capped(heartbeat_interval_));
      continue;
    }
    const Refusal refusal = Classify(s);
    if (refusal == Refusal::kRegisterAgain) continue;
    if (refusal == Refusal::kStop) break;
    ++failures;
    const absl::Duration delay = *backoff.Next();  // never empty: no deadline
    spdlog::warn(
        "coordinator {} unreachable ({}: {}); {} rank(s) keep running; retry {} in {}",
        options_.coordinator, absl::StatusCodeToString(s.code()),
        std::string(s.message()), supervisor_.running(), failures,
        absl::FormatDuration(delay));
    WaitFor(capped(delay));
  }
  notifier_.Stopping();
  draining_ = true;  // no new ranks for a worker on its way out
  if (supervisor_.running() > 0) {
    spdlog::info("stopping {} rank(s)", supervisor_.running());
    supervisor_.StopAll();
  }
  ReportFinalExits();  // best effort
}

}  // namespace tessera
