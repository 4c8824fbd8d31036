#include "common/tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/file_io.h"

namespace tessera {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free_all(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
struct SslFree {
  void operator()(SSL* s) const { SSL_free(s); }
};
struct AddrinfoFree {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// The most recent OpenSSL error, for messages; clears the queue.
std::string OpenSslError() {
  unsigned long code = ERR_get_error();  // NOLINT(runtime/int): OpenSSL's type
  std::string out;
  if (code != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    out = buf;
  }
  ERR_clear_error();
  return out.empty() ? "unknown OpenSSL error" : out;
}

std::string Hex(const unsigned char* data, size_t n) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(data), n));
}

X509Ptr ParseCertificate(absl::string_view pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return nullptr;
  return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

PkeyPtr ParseKey(absl::string_view pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return nullptr;
  return PkeyPtr(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

absl::StatusOr<std::string> CertToPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || PEM_write_bio_X509(bio.get(), cert) != 1) {
    return absl::InternalError(
        absl::StrCat("cannot encode a certificate: ", OpenSslError()));
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);  // NOLINT(runtime/int)
  return std::string(data, n);
}

absl::StatusOr<std::string> KeyToPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0,
                                                 nullptr, nullptr) != 1) {
    return absl::InternalError(absl::StrCat("cannot encode a key: ", OpenSslError()));
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);  // NOLINT(runtime/int)
  return std::string(data, n);
}

bool IsIpAddress(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 ||
         inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

absl::Status AddExtension(X509* cert, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot make certificate extension ", value, ": ", OpenSslError()));
  }
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (added != 1) return absl::InternalError("cannot add a certificate extension");
  return absl::OkStatus();
}

// A random positive 128-bit serial number.
absl::Status SetRandomSerial(X509* cert) {
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) {
    return absl::InternalError("the system random generator failed");
  }
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  ASN1_INTEGER* sn = bn != nullptr ? BN_to_ASN1_INTEGER(bn, nullptr) : nullptr;
  BN_free(bn);
  if (sn == nullptr || X509_set_serialNumber(cert, sn) != 1) {
    ASN1_INTEGER_free(sn);
    return absl::InternalError("cannot set the certificate's serial number");
  }
  ASN1_INTEGER_free(sn);
  return absl::OkStatus();
}

// Ten years of validity, the public key, and the same subject and issuer.
void SetValidityAndNames(X509* cert, EVP_PKEY* key) {
  // An hour of slack for clocks that lag behind this machine's.
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 10L * 365 * 24 * 3600);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(
      name, "CN", MBSTRING_ASC,
      reinterpret_cast<const unsigned char*>(kSelfSignedServerName), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("Tessera"), -1, -1,
                             0);
  X509_set_issuer_name(cert, name);
}

// The subjectAltName entries: the fixed server name, then each usable host
// (wildcard listen addresses and names a SAN cannot hold are left out).
std::vector<std::string> SubjectAltNames(const std::vector<std::string>& hosts) {
  std::vector<std::string> san = {absl::StrCat("DNS:", kSelfSignedServerName)};
  for (const std::string& host : hosts) {
    if (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]" ||
        host == kSelfSignedServerName) {
      continue;
    }
    std::string h = host;
    if (absl::StartsWith(h, "[") && absl::EndsWith(h, "]")) h = h.substr(1, h.size() - 2);
    // Anything else would not parse as a SAN entry.
    if (h.find_first_of(",: ") != std::string::npos && !IsIpAddress(h)) continue;
    std::string entry = absl::StrCat(IsIpAddress(h) ? "IP:" : "DNS:", h);
    if (std::find(san.begin(), san.end(), entry) == san.end()) san.push_back(entry);
  }
  return san;
}

absl::Status AddServerExtensions(X509* cert, const std::vector<std::string>& san) {
  // The certificate is its own trust anchor for pinned clients, so it signs
  // itself as a CA would.
  if (absl::Status s = AddExtension(cert, NID_basic_constraints, "critical,CA:TRUE");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          AddExtension(cert, NID_key_usage, "critical,digitalSignature,keyCertSign");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = AddExtension(cert, NID_ext_key_usage, "serverAuth"); !s.ok()) {
    return s;
  }
  if (absl::Status s = AddExtension(cert, NID_subject_key_identifier, "hash"); !s.ok()) {
    return s;
  }
  return AddExtension(cert, NID_subject_alt_name, absl::StrJoin(san, ","));
}

// A certificate or key file. InvalidArgument whatever went wrong, as the
// callers document; certificates and keys are a few KiB, so a file over 1 MiB
// is a mistake.
absl::StatusOr<std::string> ReadPemFile(const std::string& path, const char* what) {
  absl::StatusOr<std::string> data =
      ReadFile(path, {.max_bytes = 1 << 20, .what = absl::StrCat("the ", what, " file")});
  if (!data.ok()) return absl::InvalidArgumentError(data.status().message());
  return data;
}

// Splits "host:port", "[v6]:port" (with an optional "dns:///" prefix).
absl::Status SplitHostPort(absl::string_view address, std::string* host,
                           std::string* port) {
  absl::ConsumePrefix(&address, "dns:///");
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("expected [ADDRESS]:PORT, got '", address, "'"));
    }
    *host = std::string(address.substr(1, close - 1));
    *port = std::string(address.substr(close + 2));
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected HOST:PORT, got '", address, "'"));
    }
    *host = std::string(address.substr(0, colon));
    *port = std::string(address.substr(colon + 1));
  }
  int p = 0;
  if (host->empty() || !absl::SimpleAtoi(*port, &p) || p <= 0 || p > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected HOST:PORT, got '", address, "'"));
  }
  return absl::OkStatus();
}

// A TCP connection to one of `host`'s addresses within `timeout`; -1 and `error`
// set otherwise.
int ConnectWithTimeout(const std::string& host, const std::string& port,
                       absl::Duration timeout, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* raw = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &raw);
  if (rc != 0) {
    *error = absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc));
    return -1;
  }
  std::unique_ptr<addrinfo, AddrinfoFree> addrs(raw);
  const absl::Time deadline = absl::Now() + timeout;
  for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                          a->ai_protocol);
    if (fd < 0) {
      *error = std::strerror(errno);
      continue;
    }
    int err = 0;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        const int64_t ms =
            std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
        const int ready = poll(&p, 1, static_cast<int>(ms));
        socklen_t len = sizeof(err);
        if (ready <= 0) {
          err = ETIMEDOUT;
        } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
          err = errno;
        }
      }
    }
    if (err != 0) {
      *error = std::strerror(err);
      close(fd);
      continue;
    }
    // The handshake runs blocking, bounded by socket timeouts.
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    const absl::Duration left = std::max(deadline - absl::Now(), absl::Milliseconds(1));
    timeval tv = absl::ToTimeval(left);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return fd;
  }
  return -1;
}

}  // namespace

absl::StatusOr<TlsIdentity> GenerateSelfSignedIdentity(
    const std::vector<std::string>& hosts) {
  PkeyPtr key(EVP_EC_gen("P-256"));
  if (key == nullptr) {
    return absl::InternalError(absl::StrCat("cannot generate a key: ", OpenSslError()));
  }
  X509Ptr cert(X509_new());
  if (cert == nullptr) return absl::InternalError("out of memory");
  X509_set_version(cert.get(), 2);  // v3
  if (absl::Status s = SetRandomSerial(cert.get()); !s.ok()) return s;
  SetValidityAndNames(cert.get(), key.get());
  if (absl::Status s = AddServerExtensions(cert.get(), SubjectAltNames(hosts)); !s.ok()) {
    return s;
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) <= 0) {
    return absl::InternalError(
        absl::StrCat("cannot sign the certificate: ", OpenSslError()));
  }
  TlsIdentity identity;
  absl::StatusOr<std::string> cert_pem = CertToPem(cert.get());
  if (!cert_pem.ok()) return cert_pem.status();
  absl::StatusOr<std::string> key_pem = KeyToPem(key.get());
  if (!key_pem.ok()) return key_pem.status();
  identity.cert_pem = std::move(*cert_pem);
  identity.key_pem = std::move(*key_pem);
  return identity;
}

absl::Status ValidateTlsIdentity(const TlsIdentity& identity) {
  X509Ptr cert = ParseCertificate(identity.cert_pem);
  if (cert == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the certificate is not a PEM X.509 certificate");
  }
  PkeyPtr key = ParseKey(identity.key_pem);
  if (key == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the key is not an unencrypted PEM private key");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the key does not belong to the certificate");
  }
  return absl::OkStatus();
}

absl::StatusOr<TlsIdentity> LoadTlsIdentityFiles(const std::string& cert_file,
                                                 const std::string& key_file) {
  TlsIdentity identity;
  absl::StatusOr<std::string> cert = ReadPemFile(cert_file, "--tls-cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPemFile(key_file, "--tls-key");
  if (!key.ok()) return key.status();
  identity.cert_pem = std::move(*cert);
  identity.key_pem = std::move(*key);
  if (absl::Status s = ValidateTlsIdentity(identity); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-cert ", cert_file, ", --tls-key ", key_file, ": ", s.message()));
  }
  return identity;
}

absl::StatusOr<std::string> CertificateFingerprint(absl::string_view cert_pem) {
  X509Ptr cert = ParseCertificate(cert_pem);
  if (cert == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError("not a PEM X.509 certificate");
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (X509_digest(cert.get(), EVP_sha256(), md, &len) != 1) {
    return absl::InternalError(
        absl::StrCat("cannot hash the certificate: ", OpenSslError()));
  }
  return Hex(md, len);
}

absl::StatusOr<std::string> NormalizePin(absl::string_view pin) {
  std::string p = absl::AsciiStrToLower(absl::StripAsciiWhitespace(pin));
  absl::string_view v = p;
  if (!absl::ConsumePrefix(&v, "sha256-")) absl::ConsumePrefix(&v, "sha256:");
  std::string out;
  for (char c : v) {
    if (c == ':') continue;
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(
          "a certificate pin is the SHA-256 of the certificate: 64 hex digits");
    }
    out.push_back(c);
  }
  if (out.size() != 64) {
    return absl::InvalidArgumentError(
        "a certificate pin is the SHA-256 of the certificate: 64 hex digits");
  }
  return out;
}

absl::StatusOr<std::string> FetchPeerCertificate(absl::string_view address,
                                                 absl::Duration timeout) {
  std::string host, port;
  if (absl::Status s = SplitHostPort(address, &host, &port); !s.ok()) return s;
  std::string error;
  const int fd = ConnectWithTimeout(host, port, timeout, &error);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", address,
                                               " to fetch its certificate: ", error));
  }
  std::unique_ptr<SSL_CTX, SslCtxFree> ctx(SSL_CTX_new(TLS_client_method()));
  std::unique_ptr<SSL, SslFree> ssl(ctx != nullptr ? SSL_new(ctx.get()) : nullptr);
  if (ssl == nullptr) {
    close(fd);
    return absl::InternalError(absl::StrCat("cannot set up TLS: ", OpenSslError()));
  }
  // Nothing is verified here: the caller compares the certificate to a pin.
  SSL_set_verify(ssl.get(), SSL_VERIFY_NONE, nullptr);
  SSL_set_tlsext_host_name(ssl.get(), kSelfSignedServerName);
  static constexpr unsigned char kAlpn[] = {2, 'h', '2'};
  SSL_set_alpn_protos(ssl.get(), kAlpn, sizeof(kAlpn));
  SSL_set_fd(ssl.get(), fd);
  absl::StatusOr<std::string> pem = absl::UnavailableError("no certificate");
  if (SSL_connect(ssl.get()) != 1) {
    pem = absl::UnavailableError(absl::StrCat(
        address, " did not complete a TLS handshake (is it running without TLS?): ",
        OpenSslError()));
  } else {
    X509Ptr peer(SSL_get1_peer_certificate(ssl.get()));
    if (peer == nullptr) {
      pem = absl::UnavailableError(absl::StrCat(address, " presented no certificate"));
    } else {
      pem = CertToPem(peer.get());
    }
    SSL_shutdown(ssl.get());
  }
  ssl.reset();
  close(fd);
  return pem;
}

std::string AddPinToToken(absl::string_view token, absl::string_view fingerprint) {
  return absl::StrCat(token, kTokenPinSeparator, fingerprint);
}

TokenParts SplitTokenPin(absl::string_view token) {
  TokenParts parts;
  const size_t at = token.find(kTokenPinSeparator);
  if (at == absl::string_view::npos) {
    parts.token = std::string(token);
    return parts;
  }
  parts.token = std::string(token.substr(0, at));
  parts.pin = std::string(token.substr(at + std::strlen(kTokenPinSeparator)));
  return parts;
}

absl::StatusOr<ClientTls> ResolveClientTls(absl::string_view address,
                                           const std::string& ca_file,
                                           absl::string_view pin,
                                           absl::Duration timeout) {
  ClientTls tls;
  if (!ca_file.empty() && !pin.empty()) {
    return absl::InvalidArgumentError(
        "give either a CA file or a certificate pin, not both");
  }
  if (!ca_file.empty()) {
    absl::StatusOr<std::string> roots = ReadPemFile(ca_file, "CA");
    if (!roots.ok()) return roots.status();
    if (ParseCertificate(*roots) == nullptr) {
      ERR_clear_error();
      return absl::InvalidArgumentError(
          absl::StrCat("the CA file ", ca_file, " holds no PEM certificate"));
    }
    tls.enabled = true;
    tls.root_pem = std::move(*roots);
    return tls;
  }
  if (pin.empty()) return tls;
  absl::StatusOr<std::string> want = NormalizePin(pin);
  if (!want.ok()) return want.status();
  absl::StatusOr<std::string> cert = FetchPeerCertificate(address, timeout);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> got = CertificateFingerprint(*cert);
  if (!got.ok()) return got.status();
  if (*got != *want) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the coordinator at ", address, " presented a certificate with SHA-256 ", *got,
        ", but the expected pin is ", *want,
        "; refusing to connect. Ask the operator for a current token, or check that "
        "nothing intercepts the connection"));
  }
  tls.enabled = true;
  tls.root_pem = std::move(*cert);
  tls.server_name = kSelfSignedServerName;
  tls.pinned_fingerprint = *got;
  return tls;
}

}  // namespace tessera
