#include "coordinator/core/worker_identity.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/crypto.h"
#include "common/status_macros.h"
#include "common/worker_fields.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

constexpr char kCredentialPrefix[] = "tsr_worker_";
constexpr int kSecretBytes = 32;

absl::StatusOr<std::string> NewCredential() {
  ASSIGN_OR_RETURN(std::string secret, RandomBytes(kSecretBytes));
  return absl::StrCat(kCredentialPrefix, absl::BytesToHexString(secret));
}

absl::Status CheckRegistration(const v1::RegisterWorkerRequest& request) {
  RETURN_IF_ERROR(CheckWorkerName(request.name()));
  RETURN_IF_ERROR(
      CheckWorkerToken("hostname", request.hostname(), kMaxWorkerHostnameBytes));
  RETURN_IF_ERROR(
      CheckWorkerToken("device_kind", request.device_kind(), kMaxDeviceKindBytes));
  if (request.slots() < 0 || request.slots() > kMaxWorkerSlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slots: must be between 0 and ", kMaxWorkerSlots, ", got ", request.slots()));
  }
  RETURN_IF_ERROR(CheckGpuIds(request.gpu_ids()));
  if (request.worker_credential().size() > kMaxWorkerCredentialBytes) {
    return absl::InvalidArgumentError("worker_credential: too long");
  }
  return absl::OkStatus();
}

absl::Status CheckHeartbeat(const v1::HeartbeatRequest& request) {
  RETURN_IF_ERROR(CheckWorkerName(request.name()));
  if (request.ranks_size() > kMaxHeartbeatRanks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ranks: ", request.ranks_size(), " listed, limit ", kMaxHeartbeatRanks));
  }
  for (const v1::LocalRank& rank : request.ranks()) {
    if (rank.launch_error().size() > kMaxLaunchErrorBytes) {
      return absl::InvalidArgumentError(absl::StrCat("ranks.launch_error: longer than ",
                                                     kMaxLaunchErrorBytes, " bytes"));
    }
    if (rank.exit_detail().size() > kMaxExitDetailBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("ranks.exit_detail: longer than ", kMaxExitDetailBytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

WorkerIdentity::WorkerIdentity(Store* store, const Clock* clock, WorkerSessions* sessions,
                               Options options)
    : store_(store), clock_(clock), sessions_(sessions), options_(options) {}

absl::Status WorkerIdentity::Recover() {
  ASSIGN_OR_RETURN(std::vector<WorkerCredentialRecord> stored,
                   store_->ListWorkerCredentials());
  absl::MutexLock lock(&mu_);
  for (WorkerCredentialRecord& record : stored) {
    hashes_[record.worker] = std::move(record.hash);
  }
  return absl::OkStatus();
}

std::string WorkerIdentity::HashOf(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = hashes_.find(name);
  return it == hashes_.end() ? std::string() : it->second;
}

absl::Status WorkerIdentity::Verify(const std::string& name,
                                    const std::string& presented) const {
  if (!options_.enabled) return absl::OkStatus();
  const std::string stored = HashOf(name);
  if (stored.empty() || presented.empty() ||
      presented.size() > kMaxWorkerCredentialBytes ||
      !ConstantTimeEqual(Sha256(presented), stored)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "this call does not carry the credential of worker ", name,
        "; a worker gets it when it registers and sends it on every later call"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::RegisterWorkerResponse> WorkerIdentity::RegisterWorker(
    const v1::RegisterWorkerRequest& request) {
  RETURN_IF_ERROR(CheckRegistration(request));
  const std::string& name = request.name();
  absl::MutexLock registering(&register_mu_);
  const std::string stored = HashOf(name);
  const std::string& presented = request.worker_credential();
  const bool holds_credential = !stored.empty() && !presented.empty() &&
                                ConstantTimeEqual(Sha256(presented), stored);
  std::string issued;
  if (!holds_credential) {
    if (options_.enabled && !stored.empty() && sessions_->WorkerLive(name)) {
      spdlog::warn(
          "refused a registration as worker {}: the name is live and the call "
          "does not carry its credential",
          name);
      return absl::PermissionDeniedError(absl::StrCat(
          "worker name ", name,
          " belongs to a live worker; only that worker's credential (kept in its "
          "--state-dir) registers it again until the coordinator declares it dead"));
    }
    ASSIGN_OR_RETURN(issued, NewCredential());
    WorkerCredentialRecord record{name, Sha256(issued),
                                  absl::ToUnixMillis(clock_->Now())};
    // Durable before the worker holds it, so that a coordinator restarted
    // meanwhile still knows it.
    if (absl::Status s = store_->PutWorkerCredential(record); !s.ok()) {
      return absl::UnavailableError(absl::StrCat("cannot store the credential of worker ",
                                                 name, ": ", s.message()));
    }
    absl::MutexLock lock(&mu_);
    hashes_[name] = std::move(record.hash);
  }
  ASSIGN_OR_RETURN(v1::RegisterWorkerResponse response,
                   sessions_->RegisterWorker(request));
  if (!issued.empty()) {
    spdlog::info("issued worker {} its credential", name);
    response.set_worker_credential(issued);
  }
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> WorkerIdentity::Heartbeat(
    const v1::HeartbeatRequest& request) {
  RETURN_IF_ERROR(CheckHeartbeat(request));
  RETURN_IF_ERROR(Verify(request.name(), request.worker_credential()));
  return sessions_->Heartbeat(request);
}

absl::StatusOr<v1::ShipLogsResponse> WorkerIdentity::ShipLogs(
    const v1::ShipLogsRequest& request) {
  RETURN_IF_ERROR(CheckWorkerName(request.name()));
  RETURN_IF_ERROR(Verify(request.name(), request.worker_credential()));
  return sessions_->ShipLogs(request);
}

}  // namespace tessera
