#include "coordinator/core/tls_identity.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tessera {
namespace {

constexpr char kSecretName[] = "tls_self_signed_identity";
constexpr char kKeyMarker[] = "-----BEGIN PRIVATE KEY-----";

}  // namespace

absl::StatusOr<TlsIdentity> LoadOrCreateSelfSignedIdentity(
    Store& store, const std::vector<std::string>& hosts) {
  ASSIGN_OR_RETURN(TlsIdentity fresh, GenerateSelfSignedIdentity(hosts));
  // One value holds both, so a certificate is never paired with another key.
  ASSIGN_OR_RETURN(std::string stored,
                   store.GetOrCreateSecret(kSecretName, fresh.cert_pem + fresh.key_pem));
  const size_t key_at = stored.find(kKeyMarker);
  if (key_at == std::string::npos) {
    return absl::DataLossError(
        absl::StrCat("the stored self-signed TLS identity (secret ", kSecretName,
                     ") has no private key"));
  }
  TlsIdentity identity;
  identity.cert_pem = stored.substr(0, key_at);
  identity.key_pem = stored.substr(key_at);
  if (absl::Status s = ValidateTlsIdentity(identity); !s.ok()) {
    return absl::DataLossError(
        absl::StrCat("the stored self-signed TLS identity (secret ", kSecretName,
                     ") is damaged: ", s.message()));
  }
  return identity;
}

std::string HostOfAddress(const std::string& address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    return close == std::string::npos ? "" : address.substr(1, close - 1);
  }
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? "" : address.substr(0, colon);
}

}  // namespace tessera
