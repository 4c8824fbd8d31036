// GrpcAuthGate: authenticates every gRPC call from its metadata before gRPC
// reads the call's message, so an unauthenticated caller cannot make the
// coordinator receive and parse up to max_message_bytes per call.
//
// gRPC runs an auth metadata processor on a call's initial metadata, in the
// transport's server-auth filter, before the call reaches a handler and before
// its message is read. The C++ API offers processors only for TLS
// credentials, so the gate builds its own ServerCredentials over the C core's
// insecure or SSL credentials, which take a processor in both cases.
//
// The check may read the store (a token not in the Authenticator's cache), so
// it runs on the gate's own threads, never gRPC's; when `max_queued` checks
// wait already, a call is refused with RESOURCE_EXHAUSTED.
//
// The handlers still authenticate each call themselves (they need the caller's
// name); in-process channels (tests) do not pass through the gate.
//
// Thread-safety: safe from any thread. Destroying the gate waits for the
// checks already queued.
#ifndef TESSERA_COORDINATOR_API_GRPC_AUTH_GATE_H_
#define TESSERA_COORDINATOR_API_GRPC_AUTH_GATE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/tls.h"
#include "coordinator/api/task_pool.h"
#include "coordinator/core/auth.h"
#include "grpcpp/security/server_credentials.h"

namespace tessera {

class GrpcAuthGate {
 public:
  struct Options {
    // Threads that run the checks.
    int threads = 2;
    // Checks waiting for a thread; past it calls get RESOURCE_EXHAUSTED.
    int max_queued = 1024;
  };

  // Decides one call: `method` is its path ("/pkg.Service/Method"; empty if
  // gRPC did not pass it), `authorization` its "authorization" metadata.
  // OK lets the call through; an error refuses it with its code and message.
  using Check = std::function<absl::Status(absl::string_view method,
                                           absl::string_view authorization)>;

  GrpcAuthGate(Check check, Options options);
  ~GrpcAuthGate();
  GrpcAuthGate(const GrpcAuthGate&) = delete;
  GrpcAuthGate& operator=(const GrpcAuthGate&) = delete;

  // Listening credentials (TLS when `tls` is enabled, plaintext otherwise)
  // that pass every call through `gate`, which they keep alive.
  static std::shared_ptr<grpc::ServerCredentials> Credentials(
      std::shared_ptr<GrpcAuthGate> gate, const TlsIdentity& tls);

  // Runs the checks already queued, then refuses every call. Call it once the
  // server has stopped, from the gate's owner, so that no check is left to
  // run on the gate's threads when the last reference goes. Idempotent.
  void Stop() { pool_.Stop(); }

  // Calls refused so far (by the check or a full queue).
  int64_t refused() const { return refused_.load(); }

 private:
  friend class GatedServerCredentials;
  // Decides one call on the gate's threads and reports through `done`.
  void Process(std::string method, std::string authorization,
               std::function<void(const absl::Status&)> done);

  const Check check_;
  std::atomic<int64_t> refused_{0};
  TaskPool pool_;  // last: stopped first, while the rest is still alive
};

// The check for the coordinator's services: JobService calls need a user
// token, WorkerService calls a join token, TrainerService calls a valid trainer
// credential (its job, attempt and rank are checked by the handler, which has
// the request); the gRPC health service is open; any other method needs a
// user token. Every call passes when `auth` is disabled. `auth` is not owned.
GrpcAuthGate::Check CoordinatorCallCheck(Authenticator* auth);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_GRPC_AUTH_GATE_H_
