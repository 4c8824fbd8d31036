// Authentication for the coordinator's APIs. Tessera is closed by default:
// every gRPC call and every /api/ request must carry a credential.
//
//  - User tokens ("tsr_user_<id>_<secret>") for tessctl and the web API.
//  - Join tokens ("tsr_join_<id>_<secret>") for workers, on every worker RPC.
//  - Metrics tokens ("tsr_metrics_<id>_<secret>") for a Prometheus scraper:
//    they read /metrics and nothing else (an admin's user token may too).
//  - Trainer credentials ("tsr_trainer_<job>_<attempt>_<rank>_<expiry>_<mac>"),
//    issued by the coordinator with each launch order and valid only for that
//    (job, attempt, rank) until they expire. They are an HMAC-SHA256 under a
//    key kept in the store, so they survive a coordinator restart.
//
// Tokens are created with `tessera-coordinator token create` and stored as the
// SHA-256 of their secret; a presented secret is hashed and compared in
// constant time. Verified tokens are cached briefly; the cache is dropped when
// another process has written to the store (checked at most once per
// Options::external_write_check), so a token revoked with `tessera-coordinator
// token revoke` stops working within about that long, and within
// Options::cache_ttl at worst.
//
// Thread-safety: safe from any thread.
#ifndef TESSERA_COORDINATOR_CORE_AUTH_H_
#define TESSERA_COORDINATOR_CORE_AUTH_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/core/caller.h"
#include "coordinator/store/store.h"

namespace tessera {

inline constexpr char kUserToken[] = "user";
inline constexpr char kJoinToken[] = "join";
inline constexpr char kMetricsToken[] = "metrics";

// Creates and stores a token of `kind` ("user", "join" or "metrics") and returns its
// text, which is shown once and never stored. `admin` (user tokens only) makes its holder
// an admin, who sees and acts on every user's jobs and sweeps.
absl::StatusOr<std::string> CreateToken(Store& store, const Clock& clock,
                                        const std::string& kind, const std::string& name,
                                        bool admin = false);

// The id in a token's text (tsr_<kind>_<id>_<secret>, a certificate pin after
// it ignored), for Store::RevokeToken. InvalidArgument when malformed.
absl::StatusOr<int64_t> TokenIdOf(absl::string_view token);

class Authenticator {
 public:
  struct Options {
    // Off only with --insecure-no-auth: every call is let through.
    bool enabled = true;
    // How long a trainer credential stays valid.
    absl::Duration credential_lifetime = absl::Hours(72);
    // How long a verified token is trusted without reading the store again.
    absl::Duration cache_ttl = absl::Seconds(30);
    // How often a check asks the store whether another process wrote to it
    // (Store::ExternalWrites), which drops the whole cache.
    absl::Duration external_write_check = absl::Seconds(1);
    // Whether a user token's name names an admin (for example a member of the
    // --admin-group Unix group); tokens created with --admin always are.
    // Unset: only --admin tokens.
    std::function<bool(const std::string& user)> is_admin;
  };

  // Loads (or creates, on first start) the credential key from `store`.
  // `store` and `clock` are not owned.
  static absl::StatusOr<std::unique_ptr<Authenticator>> Create(Store* store,
                                                               const Clock* clock,
                                                               Options options);

  bool enabled() const { return options_.enabled; }

  // Checks an "authorization" value ("Bearer TOKEN") for a token of `kind`.
  // Returns the token's name; Unauthenticated when missing, malformed, unknown,
  // revoked or of another kind.
  absl::StatusOr<std::string> Authenticate(absl::string_view authorization,
                                           absl::string_view kind);

  // Authenticate() for a user token, as the core's Caller: its name and
  // whether it is an admin. Every caller is an admin when authentication is off.
  absl::StatusOr<Caller> AuthenticateUser(absl::string_view authorization);

  // Who may read /metrics: a metrics token, or an admin's user token.
  // Unauthenticated without a valid token; PermissionDenied for a user token
  // of a user who is not an admin. Returns the token's name.
  absl::StatusOr<std::string> AuthenticateMetricsReader(absl::string_view authorization);

  // Authenticate() for a holder of a long-lived stream: reads the store again
  // when the cached record of the token is older than `max_age`, so that a
  // stream checking every `max_age` ends within about that long of the
  // token's revocation instead of cache_ttl.
  absl::Status Recheck(absl::string_view authorization, absl::string_view kind,
                       absl::Duration max_age);

  // Drops the cached record of token `token_id`, so that its next check reads
  // the store: for a revocation made in this process (a Slurm allocation's
  // join credential), which must not wait out cache_ttl.
  void Forget(int64_t token_id);

  // A credential for one rank of one attempt.
  std::string IssueTrainerCredential(int64_t job_id, int32_t attempt, int32_t rank) const;
  // Unauthenticated unless `authorization` carries a valid, unexpired trainer
  // credential; PermissionDenied when it is valid for another (job, attempt, rank).
  absl::Status CheckTrainer(absl::string_view authorization, int64_t job_id,
                            int32_t attempt, int32_t rank);

  // Calls refused so far, for the operator's figures.
  int64_t rejected() const { return rejected_.load(); }

 private:
  Authenticator(Store* store, const Clock* clock, Options options, std::string key);
  absl::Status Reject(absl::string_view why);
  // Authenticate()'s work: the verified token's record.
  // A cached record older than `max_age` is read again.
  absl::StatusOr<TokenRecord> Verify(absl::string_view authorization,
                                     absl::string_view kind, absl::Duration max_age);
  std::string Mac(absl::string_view message) const;
  // Empties the cache when another process wrote to the store since the last
  // look, at most once per external_write_check.
  void DropCacheOnExternalWrites(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Store* const store_;        // Not owned.
  const Clock* const clock_;  // Not owned.
  const Options options_;
  const std::string key_;  // HMAC key for trainer credentials

  absl::Mutex mu_;
  struct Cached {
    TokenRecord token;
    absl::Time fetched;
  };
  std::map<int64_t, Cached> cache_ ABSL_GUARDED_BY(mu_);
  std::optional<int64_t> external_writes_ ABSL_GUARDED_BY(mu_);  // last seen
  absl::Time external_checked_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::atomic<int64_t> rejected_{0};
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_AUTH_H_
