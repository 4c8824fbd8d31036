// TLS helpers shared by the coordinator, the worker, the trainer's launcher and
// tessctl. Plain OpenSSL; no gRPC here, so every binary can use them.
//
//  - The coordinator's identity: an operator's certificate and key files
//    (LoadTlsIdentityFiles), or a self-signed EC P-256 certificate made for a lab
//    without a PKI (GenerateSelfSignedIdentity).
//  - Pinning: a client that holds the SHA-256 of the coordinator's certificate
//    (join tokens carry it, see AddPinToToken) fetches the certificate with an
//    unverified handshake (FetchPeerCertificate), compares its fingerprint to the
//    pin, and then trusts that certificate alone, with the name
//    kSelfSignedServerName (ResolveClientTls). gRPC 1.51's custom verifier API is
//    experimental; this keeps to its stable SSL credentials.
//
// Thread-safety: every function is safe to call from any thread.
#ifndef TESSERA_COMMON_TLS_H_
#define TESSERA_COMMON_TLS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tessera {

// The DNS name in every self-signed certificate; pinned clients ask for it
// (gRPC's ssl_target_name_override) whatever address they dial.
inline constexpr char kSelfSignedServerName[] = "tessera-coordinator";

// What a TLS server presents: PEM certificate (chain) and PEM private key.
// Empty: plaintext.
struct TlsIdentity {
  std::string cert_pem;
  std::string key_pem;

  bool enabled() const { return !cert_pem.empty(); }
};

// A self-signed EC P-256 certificate and key, valid for 10 years from an hour
// ago, with CN and DNS SAN kSelfSignedServerName plus each of `hosts` (an IP
// address becomes an IP SAN; empty and wildcard entries are skipped).
absl::StatusOr<TlsIdentity> GenerateSelfSignedIdentity(
    const std::vector<std::string>& hosts);

// Reads an operator's PEM certificate (chain) and private key. InvalidArgument
// naming the file when a file cannot be read or parsed, or when the key does not
// belong to the certificate.
absl::StatusOr<TlsIdentity> LoadTlsIdentityFiles(const std::string& cert_file,
                                                 const std::string& key_file);

// Checks that `identity` holds a parseable certificate and a matching key.
absl::Status ValidateTlsIdentity(const TlsIdentity& identity);

// The lower-case hex SHA-256 of the first certificate in `cert_pem`, over its
// DER encoding (what `openssl x509 -noout -fingerprint -sha256` prints, without
// the colons).
absl::StatusOr<std::string> CertificateFingerprint(absl::string_view cert_pem);

// `pin` as 64 lower-case hex digits: accepts upper case, colons and an optional
// "sha256-" or "sha256:" prefix. InvalidArgument otherwise.
absl::StatusOr<std::string> NormalizePin(absl::string_view pin);

// Connects to `address` ("host:port", "[v6]:port", optionally "dns:///"
// prefixed), completes a TLS handshake without verifying anything, and returns
// the certificate the server presented, as PEM. Unavailable when the address
// cannot be reached or does not speak TLS within `timeout`.
absl::StatusOr<std::string> FetchPeerCertificate(absl::string_view address,
                                                 absl::Duration timeout);

// Join and user tokens can carry the coordinator's certificate pin:
// "tsr_join_<id>_<secret>.sha256-<64 hex>". The suffix is public information;
// only the part before it authenticates.
inline constexpr char kTokenPinSeparator[] = ".sha256-";
std::string AddPinToToken(absl::string_view token, absl::string_view fingerprint);
struct TokenParts {
  std::string token;  // without the pin
  std::string pin;    // empty when the token carries none
};
TokenParts SplitTokenPin(absl::string_view token);

// How a client talks to the coordinator.
struct ClientTls {
  bool enabled = false;
  // The only roots trusted (gRPC's pem_root_certs).
  std::string root_pem;
  // Name checked against the certificate instead of the dialled host; empty:
  // the host itself.
  std::string server_name;
  // Fingerprint of the pinned certificate (empty without a pin), for logs.
  std::string pinned_fingerprint;
};

// Decides how to reach `address`:
//  - `ca_file` set: TLS, trusting the roots in that file, checking the host name.
//  - else `pin` set: fetches the certificate, compares it to the pin
//    (FailedPrecondition naming both fingerprints on a mismatch), then trusts
//    that certificate only, under kSelfSignedServerName.
//  - neither: plaintext (enabled = false).
// Setting both is InvalidArgument.
absl::StatusOr<ClientTls> ResolveClientTls(absl::string_view address,
                                           const std::string& ca_file,
                                           absl::string_view pin,
                                           absl::Duration timeout = absl::Seconds(10));

}  // namespace tessera

#endif  // TESSERA_COMMON_TLS_H_
