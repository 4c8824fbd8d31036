// TLS on the coordinator's listeners: self-signed identities kept in the store,
// certificate pins in tokens, pinned and CA-verified gRPC clients, HTTPS, and
// plaintext clients refused. A real CoordinatorServer on 127.0.0.1.
#include "common/tls.h"

#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/client.h"
#include "common/grpc_tls.h"
#include "coordinator/coordinator_server.h"
#include "coordinator/core/auth.h"
#include "coordinator/core/tls_identity.h"
#include "coordinator/store/sqlite_store.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tessera/v1/tessera.grpc.pb.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::tessera::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

TEST(TlsTest, SelfSignedIdentityHasMatchingKeyAndStableFingerprint) {
  absl::StatusOr<TlsIdentity> identity = GenerateSelfSignedIdentity({"127.0.0.1"});
  ASSERT_TRUE(identity.ok()) << identity.status();
  EXPECT_TRUE(ValidateTlsIdentity(*identity).ok());
  EXPECT_THAT(identity->cert_pem, HasSubstr("BEGIN CERTIFICATE"));
  EXPECT_THAT(identity->key_pem, HasSubstr("BEGIN PRIVATE KEY"));
  absl::StatusOr<std::string> a = CertificateFingerprint(identity->cert_pem);
  absl::StatusOr<std::string> b = CertificateFingerprint(identity->cert_pem);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(*a, MatchesRegex("[0-9a-f]{64}"));
  EXPECT_EQ(*a, *b);
  // A new identity is a new key and certificate.
  absl::StatusOr<TlsIdentity> other = GenerateSelfSignedIdentity({});
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*CertificateFingerprint(other->cert_pem), *a);
  // Mixing them up is caught.
  TlsIdentity mixed{identity->cert_pem, other->key_pem};
  EXPECT_THAT(std::string(ValidateTlsIdentity(mixed).message()),
              HasSubstr("does not belong"));
}

TEST(TlsTest, PinsNormalizeFromOpenSslFormat) {
  const std::string hex(64, 'a');
  std::string colons;
  for (int i = 0; i < 32; ++i) absl::StrAppend(&colons, i ? ":" : "", "AA");
  EXPECT_EQ(*NormalizePin(hex), hex);
  EXPECT_EQ(*NormalizePin(colons), hex);
  EXPECT_EQ(*NormalizePin("sha256-" + hex), hex);
  EXPECT_FALSE(NormalizePin("abc").ok());
  EXPECT_FALSE(NormalizePin(std::string(64, 'z')).ok());
}

TEST(TlsTest, TokenCarriesPinAfterTheSecret) {
  const std::string pin(64, 'b');
  const std::string token = AddPinToToken("tsr_join_3_abcdef", pin);
  EXPECT_EQ(token, "tsr_join_3_abcdef.sha256-" + pin);
  TokenParts parts = SplitTokenPin(token);
  EXPECT_EQ(parts.token, "tsr_join_3_abcdef");
  EXPECT_EQ(parts.pin, pin);
  parts = SplitTokenPin("tsr_join_3_abcdef");
  EXPECT_EQ(parts.token, "tsr_join_3_abcdef");
  EXPECT_EQ(parts.pin, "");
}

TEST(TlsTest, OperatorFilesLoadAndMismatchesAreNamed) {
  TempDir dir;
  TlsIdentity a = *GenerateSelfSignedIdentity({});
  TlsIdentity b = *GenerateSelfSignedIdentity({});
  std::ofstream(dir.File("cert.pem")) << a.cert_pem;
  std::ofstream(dir.File("key.pem")) << a.key_pem;
  std::ofstream(dir.File("other-key.pem")) << b.key_pem;
  absl::StatusOr<TlsIdentity> loaded =
      LoadTlsIdentityFiles(dir.File("cert.pem"), dir.File("key.pem"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->cert_pem, a.cert_pem);
  absl::StatusOr<TlsIdentity> wrong =
      LoadTlsIdentityFiles(dir.File("cert.pem"), dir.File("other-key.pem"));
  EXPECT_TRUE(absl::IsInvalidArgument(wrong.status()));
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("other-key.pem"));
  absl::StatusOr<TlsIdentity> missing =
      LoadTlsIdentityFiles(dir.File("nope.pem"), dir.File("key.pem"));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("nope.pem"));
}

TEST(TlsTest, SelfSignedIdentityIsKeptInTheStoreAcrossRestarts) {
  TempDir dir;
  std::string first;
  {
    auto store = SqliteStore::Open(dir.File("tessera.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<TlsIdentity> identity =
        LoadOrCreateSelfSignedIdentity(**store, {"127.0.0.1"});
    ASSERT_TRUE(identity.ok()) << identity.status();
    first = *CertificateFingerprint(identity->cert_pem);
  }
  auto store = SqliteStore::Open(dir.File("tessera.db"));
  ASSERT_TRUE(store.ok());
  absl::StatusOr<TlsIdentity> again = LoadOrCreateSelfSignedIdentity(**store, {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*CertificateFingerprint(again->cert_pem), first);
  EXPECT_TRUE(ValidateTlsIdentity(*again).ok());
}

TEST(TlsTest, FetchingACertificateFromAPlaintextServerFails) {
  CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.db_path = ":memory:";
  auto server = CoordinatorServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->tls_fingerprint(), "");
  absl::StatusOr<std::string> cert = FetchPeerCertificate(
      absl::StrCat("127.0.0.1:", (*server)->port()), absl::Seconds(5));
  EXPECT_TRUE(absl::IsUnavailable(cert.status())) << cert.status();
  EXPECT_THAT(std::string(cert.status().message()), HasSubstr("TLS handshake"));
}

// A coordinator with TLS on both listeners and a user token.
class TlsServerTest : public ::testing::Test {
 protected:
  void Start(bool self_signed, const TlsIdentity& tls = {}) {
    CoordinatorOptions options;
    options.listen = "127.0.0.1:0";
    options.http = "127.0.0.1:0";
    options.db_path = dir_.File("tessera.db");
    options.tls_self_signed = self_signed;
    options.tls = tls;
    auto server = CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    RealClock clock;
    absl::StatusOr<std::string> token =
        CreateToken(server_->store(), clock, kUserToken, "tls-test");
    ASSERT_TRUE(token.ok());
    token_ = *token;
    address_ = absl::StrCat("127.0.0.1:", server_->port());
  }

  // ListJobs over `channel` with the user token.
  grpc::Status ListJobs(const std::shared_ptr<grpc::Channel>& channel,
                        const std::string& token) {
    auto stub = v1::JobService::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    ctx.AddMetadata("authorization", "Bearer " + token);
    v1::ListJobsResponse response;
    return stub->ListJobs(&ctx, v1::ListJobsRequest(), &response);
  }

  static std::shared_ptr<grpc::Channel> TlsChannel(const std::string& address,
                                                   const ClientTls& tls) {
    grpc::ChannelArguments args;
    return grpc::CreateCustomChannel(address, ChannelCredentialsFor(tls, args), args);
  }

  TempDir dir_;
  std::unique_ptr<CoordinatorServer> server_;
  std::string token_;
  std::string address_;
};

TEST_F(TlsServerTest, PinnedClientTalksToSelfSignedCoordinator) {
  Start(/*self_signed=*/true);
  const std::string pin = server_->tls_fingerprint();
  ASSERT_THAT(pin, MatchesRegex("[0-9a-f]{64}"));
  absl::StatusOr<ClientTls> tls = ResolveClientTls(address_, "", pin);
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_TRUE(tls->enabled);
  EXPECT_EQ(tls->server_name, kSelfSignedServerName);
  EXPECT_EQ(tls->pinned_fingerprint, pin);
  grpc::Status s = ListJobs(TlsChannel(address_, *tls), token_);
  EXPECT_TRUE(s.ok()) << s.error_message();
  // The token with its pin attached authenticates too.
  s = ListJobs(TlsChannel(address_, *tls), AddPinToToken(token_, pin));
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(TlsServerTest, SelfSignedCertificateSurvivesRestart) {
  Start(/*self_signed=*/true);
  const std::string pin = server_->tls_fingerprint();
  server_->Shutdown();
  server_.reset();
  Start(/*self_signed=*/true);
  EXPECT_EQ(server_->tls_fingerprint(), pin);
  absl::StatusOr<ClientTls> tls = ResolveClientTls(address_, "", pin);
  EXPECT_TRUE(tls.ok()) << tls.status();
}

TEST_F(TlsServerTest, WrongPinIsRefusedNamingBothHashes) {
  Start(/*self_signed=*/true);
  const std::string wrong(64, '0');
  absl::StatusOr<ClientTls> tls = ResolveClientTls(address_, "", wrong);
  ASSERT_TRUE(absl::IsFailedPrecondition(tls.status())) << tls.status();
  EXPECT_THAT(std::string(tls.status().message()), HasSubstr(wrong));
  EXPECT_THAT(std::string(tls.status().message()), HasSubstr(server_->tls_fingerprint()));
}

TEST_F(TlsServerTest, PlaintextClientIsRefused) {
  Start(/*self_signed=*/true);
  grpc::Status s =
      ListJobs(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()), token_);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

TEST_F(TlsServerTest, ClientTrustingAnotherCertificateIsRefused) {
  Start(/*self_signed=*/true);
  ClientTls other;
  other.root_pem = GenerateSelfSignedIdentity({})->cert_pem;
  other.server_name = kSelfSignedServerName;
  grpc::Status s = ListJobs(TlsChannel(address_, other), token_);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

TEST_F(TlsServerTest, OperatorCertificateVerifiesAgainstItsCaFile) {
  // The operator's certificate names the address clients dial.
  TlsIdentity identity = *GenerateSelfSignedIdentity({"127.0.0.1"});
  std::ofstream(dir_.File("ca.pem")) << identity.cert_pem;
  Start(/*self_signed=*/false, identity);
  absl::StatusOr<ClientTls> tls = ResolveClientTls(address_, dir_.File("ca.pem"), "");
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_EQ(tls->server_name, "");  // the host name is checked
  grpc::Status s = ListJobs(TlsChannel(address_, *tls), token_);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(absl::IsInvalidArgument(
      ResolveClientTls(address_, dir_.File("ca.pem"), std::string(64, 'a')).status()));
}

TEST_F(TlsServerTest, HttpsAnswersWithTheCertificateAndPlainHttpDoesNot) {
  Start(/*self_signed=*/true);
  const int http_port = server_->http_port();
  ASSERT_GT(http_port, 0);
  absl::StatusOr<std::string> fetched =
      FetchPeerCertificate(absl::StrCat("127.0.0.1:", http_port), absl::Seconds(5));
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ(*CertificateFingerprint(*fetched), server_->tls_fingerprint());

  std::ofstream(dir_.File("coordinator.pem")) << *fetched;
  httplib::SSLClient https("127.0.0.1", http_port);
  https.set_ca_cert_path(dir_.File("coordinator.pem").c_str());
  https.enable_server_certificate_verification(true);
  https.set_connection_timeout(5);
  httplib::Result health = https.Get("/healthz");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  httplib::Result jobs =
      https.Get("/api/v1/jobs", {{"Authorization", "Bearer " + token_}});
  ASSERT_TRUE(jobs);
  EXPECT_EQ(jobs->status, 200);
  EXPECT_THAT(jobs->body, HasSubstr("jobs"));

  httplib::Client plain("127.0.0.1", http_port);
  plain.set_connection_timeout(5);
  plain.set_read_timeout(5);
  httplib::Result refused = plain.Get("/healthz");
  EXPECT_FALSE(refused && refused->status == 200);
}

TEST_F(TlsServerTest, TessctlPinsFromItsTokenAndRefusesAWrongPin) {
  Start(/*self_signed=*/true);
  const std::string pin = server_->tls_fingerprint();
  auto client = cli::MakeCoordinatorClient(
      cli::ConnectionOptions{.address = address_, .token = AddPinToToken(token_, pin)});
  absl::StatusOr<v1::ListJobsResponse> jobs = client->ListJobs();
  EXPECT_TRUE(jobs.ok()) << jobs.status();

  auto pinned = cli::MakeCoordinatorClient(cli::ConnectionOptions{
      .address = address_, .token = token_, .tls_pin = std::string(64, 'f')});
  jobs = pinned->ListJobs();
  EXPECT_TRUE(absl::IsFailedPrecondition(jobs.status())) << jobs.status();
  EXPECT_THAT(std::string(jobs.status().message()), HasSubstr(pin));

  auto plaintext = cli::MakeCoordinatorClient(
      cli::ConnectionOptions{.address = address_, .token = token_});
  jobs = plaintext->ListJobs();
  EXPECT_TRUE(absl::IsUnavailable(jobs.status())) << jobs.status();
}

}  // namespace
}  // namespace tessera
