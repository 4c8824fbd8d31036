#include "coordinator/core/auth.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/crypto.h"
#include "common/status_macros.h"
#include "common/tls.h"

namespace tessera {
namespace {

constexpr char kKeyName[] = "trainer_credential_key";
constexpr int kSecretBytes = 32;

// "Bearer X" -> "X"; empty when the value has another form.
absl::string_view BearerToken(absl::string_view authorization) {
  constexpr absl::string_view kBearer = "Bearer ";
  if (!absl::StartsWith(authorization, kBearer)) return {};
  return authorization.substr(kBearer.size());
}

}  // namespace

absl::StatusOr<std::string> CreateToken(Store& store, const Clock& clock,
                                        const std::string& kind, const std::string& name,
                                        bool admin) {
  if (kind != kUserToken && kind != kJoinToken && kind != kMetricsToken) {
    return absl::InvalidArgumentError(
        absl::StrCat("token kind must be user, join or metrics, got '", kind, "'"));
  }
  if (admin && kind != kUserToken) {
    return absl::InvalidArgumentError("only a user token can be an admin token");
  }
  if (name.empty() || name.size() > 128) {
    return absl::InvalidArgumentError("token name: must be 1-128 characters");
  }
  ASSIGN_OR_RETURN(std::string secret_bytes, RandomBytes(kSecretBytes));
  const std::string secret = absl::BytesToHexString(secret_bytes);
  TokenRecord record;
  record.kind = kind;
  record.name = name;
  record.hash = Sha256(secret);
  record.created_unix_ms = absl::ToUnixMillis(clock.Now());
  record.admin = admin;
  ASSIGN_OR_RETURN(int64_t id, store.CreateToken(record));
  return absl::StrCat("tsr_", kind, "_", id, "_", secret);
}

absl::StatusOr<int64_t> TokenIdOf(absl::string_view token) {
  token = token.substr(0, token.find(kTokenPinSeparator));
  std::vector<absl::string_view> parts = absl::StrSplit(token, '_');
  int64_t id = 0;
  if (parts.size() != 4 || parts[0] != "tsr" || !absl::SimpleAtoi(parts[2], &id)) {
    return absl::InvalidArgumentError("malformed token");
  }
  return id;
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(Store* store,
                                                                     const Clock* clock,
                                                                     Options options) {
  ASSIGN_OR_RETURN(std::string fresh, RandomBytes(kSecretBytes));
  ASSIGN_OR_RETURN(std::string key, store->GetOrCreateSecret(kKeyName, fresh));
  return std::unique_ptr<Authenticator>(
      new Authenticator(store, clock, options, std::move(key)));
}

Authenticator::Authenticator(Store* store, const Clock* clock, Options options,
                             std::string key)
    : store_(store), clock_(clock), options_(options), key_(std::move(key)) {}

absl::Status Authenticator::Reject(absl::string_view why) {
  rejected_.fetch_add(1);
  return absl::UnauthenticatedError(why);
}

absl::StatusOr<std::string> Authenticator::Authenticate(absl::string_view authorization,
                                                        absl::string_view kind) {
  if (!options_.enabled) return std::string("anonymous");
  ASSIGN_OR_RETURN(TokenRecord record, Verify(authorization, kind, options_.cache_ttl));
  return record.name;
}

absl::StatusOr<Caller> Authenticator::AuthenticateUser(absl::string_view authorization) {
  if (!options_.enabled) return Caller::Admin("anonymous");
  ASSIGN_OR_RETURN(TokenRecord record,
                   Verify(authorization, kUserToken, options_.cache_ttl));
  const bool admin =
      record.admin || (options_.is_admin && options_.is_admin(record.name));
  return Caller{record.name, admin};
}

absl::StatusOr<std::string> Authenticator::AuthenticateMetricsReader(
    absl::string_view authorization) {
  if (!options_.enabled) return std::string("anonymous");
  const absl::string_view token = BearerToken(authorization);
  if (absl::StartsWith(token, absl::StrCat("tsr_", kMetricsToken, "_"))) {
    return Authenticate(authorization, kMetricsToken);
  }
  ASSIGN_OR_RETURN(const Caller caller, AuthenticateUser(authorization));
  if (!caller.admin) {
    rejected_.fetch_add(1);
    return absl::PermissionDeniedError(
        "/metrics needs a metrics token (tessera-coordinator token create --kind "
        "metrics) or an admin's token");
  }
  return caller.name;
}

void Authenticator::Forget(int64_t token_id) {
  absl::MutexLock lock(&mu_);
  cache_.erase(token_id);
}

absl::Status Authenticator::Recheck(absl::string_view authorization,
                                    absl::string_view kind, absl::Duration max_age) {
  if (!options_.enabled) return absl::OkStatus();
  return Verify(authorization, kind, std::min(max_age, options_.cache_ttl)).status();
}

absl::StatusOr<TokenRecord> Authenticator::Verify(absl::string_view authorization,
                                                  absl::string_view kind,
                                                  absl::Duration max_age) {
  if (authorization.empty()) {
    return Reject(absl::StrCat("this call needs a ", kind,
                               " token: send 'authorization: Bearer TOKEN'"));
  }
  absl::string_view token = BearerToken(authorization);
  // A token may end in its coordinator's certificate pin (see tls.h), which is
  // public; only the part before it authenticates.
  token = token.substr(0, token.find(kTokenPinSeparator));
  // tsr_<kind>_<id>_<secret>
  std::vector<absl::string_view> parts = absl::StrSplit(token, '_');
  absl::StatusOr<int64_t> parsed = TokenIdOf(token);
  if (!parsed.ok()) return Reject("malformed token");
  const int64_t id = *parsed;
  if (parts[1] != kind) {
    return Reject(absl::StrCat(
        "a ", parts[1], " token cannot make this call; it needs a ", kind, " token"));
  }
  const std::string presented = Sha256(parts[3]);
  const absl::Time now = clock_->Now();
  TokenRecord record;
  {
    absl::MutexLock lock(&mu_);
    DropCacheOnExternalWrites(now);
    auto it = cache_.find(id);
    if (it != cache_.end() && now - it->second.fetched < max_age) {
      record = it->second.token;
    } else {
      absl::StatusOr<TokenRecord> stored = store_->GetToken(id);
      if (absl::IsNotFound(stored.status())) return Reject("unknown token");
      if (!stored.ok()) {
        return absl::UnavailableError(
            absl::StrCat("cannot check the token: ", stored.status().message()));
      }
      record = *stored;
      cache_[id] = Cached{record, now};
    }
  }
  if (!ConstantTimeEqual(presented, record.hash) || record.kind != kind) {
    return Reject("unknown token");
  }
  if (record.revoked) return Reject("token revoked");
  return record;
}

void Authenticator::DropCacheOnExternalWrites(absl::Time now) {
  if (now - external_checked_ < options_.external_write_check) return;
  external_checked_ = now;
  absl::StatusOr<int64_t> writes = store_->ExternalWrites();
  if (!writes.ok()) return;  // the cache_ttl bound still holds
  if (external_writes_.has_value() && *external_writes_ != *writes) cache_.clear();
  external_writes_ = *writes;
}

std::string Authenticator::Mac(absl::string_view message) const {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), md, &len);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(md), len));
}

std::string Authenticator::IssueTrainerCredential(int64_t job_id, int32_t attempt,
                                                  int32_t rank) const {
  const int64_t expiry =
      absl::ToUnixSeconds(clock_->Now() + options_.credential_lifetime);
  const std::string scope = absl::StrCat(job_id, "_", attempt, "_", rank, "_", expiry);
  return absl::StrCat("tsr_trainer_", scope, "_", Mac(scope));
}

absl::Status Authenticator::CheckTrainer(absl::string_view authorization, int64_t job_id,
                                         int32_t attempt, int32_t rank) {
  if (!options_.enabled) return absl::OkStatus();
  const absl::string_view token = BearerToken(authorization);
  // tsr_trainer_<job>_<attempt>_<rank>_<expiry>_<mac>
  std::vector<absl::string_view> parts = absl::StrSplit(token, '_');
  int64_t job = 0, expiry = 0;
  int32_t att = 0, r = 0;
  if (parts.size() != 7 || parts[0] != "tsr" || parts[1] != "trainer" ||
      !absl::SimpleAtoi(parts[2], &job) || !absl::SimpleAtoi(parts[3], &att) ||
      !absl::SimpleAtoi(parts[4], &r) || !absl::SimpleAtoi(parts[5], &expiry)) {
    return Reject("this call needs the trainer credential of its rank");
  }
  const std::string scope = absl::StrCat(job, "_", att, "_", r, "_", expiry);
  if (!ConstantTimeEqual(Mac(scope), parts[6]))
    return Reject("invalid trainer credential");
  if (absl::FromUnixSeconds(expiry) < clock_->Now()) {
    return Reject("trainer credential expired");
  }
  if (job != job_id || att != attempt || r != rank) {
    rejected_.fetch_add(1);
    return absl::PermissionDeniedError(
        absl::StrCat("this credential is for job ", job, " attempt ", att, " rank ", r,
                     ", not job ", job_id, " attempt ", attempt, " rank ", rank));
  }
  return absl::OkStatus();
}

}  // namespace tessera
