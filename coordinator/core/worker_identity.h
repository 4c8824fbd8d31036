// WorkerIdentity: each worker's own credential, bound to its name, and the
// gate every worker call passes before it reaches WorkerSessions.
//
// A worker first registers with the cluster's join token, which every worker
// holds. The coordinator then issues it a credential of its own
// ("tsr_worker_<64 hex digits>") in RegisterWorkerResponse, and keeps only its
// SHA-256 in the store (written before the answer); the worker keeps the
// credential in its state dir (mode 0600) and sends it on every later call.
// From then on:
//  - A registration under a name that is live (registered and not declared
//    dead, WorkerSessions::WorkerLive) is refused with PermissionDenied unless it
//    carries that name's credential. With it, it is accepted at once, with a
//    new epoch: a worker that systemd restarts needs no wait. A name that is
//    not live may be claimed with the join token alone; that issues a new
//    credential (a node reinstalled without its state dir).
//  - Heartbeat and ShipLogs must carry the name's credential
//    (PermissionDenied otherwise; the worker then registers again), so a join
//    token alone cannot speak for another worker's session.
//  - Every field a worker sends has a limit (InvalidArgument): name
//    (common/worker_fields.h), hostname, device kind, slots, GPU ids, the
//    ranks listed in a heartbeat and their launch errors.
// No message names an epoch.
//
// With Options::enabled false (--insecure-no-auth) credentials are still
// issued but never required.
//
// Thread-safety: safe from any thread. Registrations are serialized by their
// own mutex, held across one store write (registrations are rare); heartbeats
// and log shipments take only the mutex over the in-memory hashes, which is
// never held across I/O or a call into WorkerSessions.
#ifndef TESSERA_COORDINATOR_CORE_WORKER_IDENTITY_H_
#define TESSERA_COORDINATOR_CORE_WORKER_IDENTITY_H_

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "coordinator/core/worker_sessions.h"
#include "coordinator/store/store.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

class WorkerIdentity {
 public:
  struct Options {
    // Off only with --insecure-no-auth: credentials are issued, never required.
    bool enabled = true;
  };

  // `store`, `clock` and `sessions` are not owned and must outlive this.
  WorkerIdentity(Store* store, const Clock* clock, WorkerSessions* sessions,
                 Options options);

  WorkerIdentity(const WorkerIdentity&) = delete;
  WorkerIdentity& operator=(const WorkerIdentity&) = delete;

  // Loads the stored credential hashes. Call once, before serving.
  absl::Status Recover();

  // Checks the fields and the name's credential (see above), stores a new
  // credential when one is issued, then registers with WorkerSessions. The
  // response carries the new credential, or none when the presented one
  // stays valid.
  absl::StatusOr<tessera::v1::RegisterWorkerResponse> RegisterWorker(
      const tessera::v1::RegisterWorkerRequest& request);
  absl::StatusOr<tessera::v1::HeartbeatResponse> Heartbeat(
      const tessera::v1::HeartbeatRequest& request);
  absl::StatusOr<tessera::v1::ShipLogsResponse> ShipLogs(
      const tessera::v1::ShipLogsRequest& request);

  // OK when `presented` is the credential issued to worker `name` (always
  // when not enabled); PermissionDenied otherwise.
  absl::Status Verify(const std::string& name, const std::string& presented) const;

 private:
  // The stored hash for `name`, empty when it has none.
  std::string HashOf(const std::string& name) const;

  Store* const store_;              // Not owned.
  const Clock* const clock_;        // Not owned.
  WorkerSessions* const sessions_;  // Not owned.
  const Options options_;

  // Held by RegisterWorker from its decision to WorkerSessions' answer, so
  // that two registrations of one name cannot interleave.
  absl::Mutex register_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  // Worker name -> SHA-256 of its credential.
  std::map<std::string, std::string> hashes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_WORKER_IDENTITY_H_
