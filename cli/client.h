// CoordinatorClient: tessctl's view of the coordinator's JobService. Each method
// is one unary RPC with a deadline; gRPC statuses come back as absl::Status with
// the same code (UNAVAILABLE -> Unavailable, NOT_FOUND -> NotFound, ...).
//
// When Options::token is set, every call carries it as the gRPC metadata
// "authorization: Bearer <token>". The token is never logged or printed.
//
// The client is built from a channel, so tests can hand it an in-process channel;
// MakeCoordinatorClient() builds one over a TCP channel to "host:port": TLS when
// given a CA file or a certificate pin (see ConnectionOptions), else plaintext.
//
// Thread-safety: all methods may be called concurrently (the generated stub is
// thread-safe and the client holds no other mutable state).
#ifndef TESSERA_CLI_CLIENT_H_
#define TESSERA_CLI_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tessera/v1/tessera.grpc.pb.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera::cli {

// Converts a gRPC status to an absl::Status with the same code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

// The metadata key (lower case, as gRPC requires) that carries the token.
inline constexpr char kAuthorizationMetadata[] = "authorization";

// InvalidArgument unless `token` can travel as a gRPC metadata value: 1 to 4096
// printable ASCII characters without spaces. The message never contains the
// token.
absl::Status ValidateToken(absl::string_view token);

class CoordinatorClient {
 public:
  struct Options {
    // Deadline of every call.
    absl::Duration rpc_timeout = absl::Seconds(10);
    // How the coordinator is named in messages, e.g. "127.0.0.1:50051". Channels
    // do not expose their target, so the factory records it here.
    std::string target = "the coordinator";
    // Sent as "authorization: Bearer <token>" on every call; empty: no header.
    std::string token;
  };

  CoordinatorClient(std::shared_ptr<grpc::Channel> channel, Options options);
  // A client whose every call fails with `unusable` (e.g. the coordinator's
  // certificate did not match the pin).
  CoordinatorClient(absl::Status unusable, Options options);

  CoordinatorClient(const CoordinatorClient&) = delete;
  CoordinatorClient& operator=(const CoordinatorClient&) = delete;

  // Returns the job id.
  absl::StatusOr<int64_t> SubmitJob(const tessera::v1::SubmitJobRequest& request);
  // One page of jobs (response.next_before_id names the next).
  absl::StatusOr<tessera::v1::ListJobsResponse> ListJobs(
      const tessera::v1::ListJobsRequest& request = {});
  // NotFound when the coordinator knows no such job.
  absl::StatusOr<tessera::v1::Job> GetJob(int64_t job_id);
  absl::StatusOr<std::vector<tessera::v1::MetricPoint>> GetMetrics(
      const tessera::v1::GetMetricsRequest& request);
  absl::StatusOr<std::vector<tessera::v1::Worker>> ListWorkers();
  absl::StatusOr<std::vector<tessera::v1::UserShare>> GetShare();
  // Drains (or, with `undrain`, returns to service) a worker; admin only.
  absl::StatusOr<tessera::v1::Worker> DrainWorker(const std::string& name,
                                                  int64_t timeout_ms, bool undrain);
  // The job's state after the cancel; FailedPrecondition if it had ended.
  absl::StatusOr<tessera::v1::JobState> CancelJob(int64_t job_id);
  absl::StatusOr<tessera::v1::GetLogsResponse> GetLogs(
      const tessera::v1::GetLogsRequest& request);

  absl::StatusOr<tessera::v1::SubmitSweepResponse> SubmitSweep(
      const tessera::v1::SubmitSweepRequest& request);
  absl::StatusOr<std::vector<tessera::v1::Sweep>> ListSweeps();
  // NotFound when the coordinator knows no such sweep.
  absl::StatusOr<tessera::v1::Sweep> GetSweep(int64_t sweep_id);
  absl::StatusOr<tessera::v1::SweepReport> GetSweepReport(int64_t sweep_id);
  // The sweep's state after the cancel; FailedPrecondition if it had ended.
  absl::StatusOr<tessera::v1::SweepState> CancelSweep(int64_t sweep_id);

  absl::StatusOr<tessera::v1::SubmitSearchResponse> SubmitSearch(
      const tessera::v1::SubmitSearchRequest& request);
  absl::StatusOr<std::vector<tessera::v1::Search>> ListSearches();
  // NotFound when the coordinator knows no such search (or it is another
  // user's).
  absl::StatusOr<tessera::v1::Search> GetSearch(int64_t search_id);
  // The search's state after the cancel; FailedPrecondition if it had ended.
  absl::StatusOr<tessera::v1::SearchState> CancelSearch(int64_t search_id);

  const std::string& target() const { return options_.target; }

 private:
  // Sets the deadline and the authorization metadata; the unusable status, if any.
  absl::Status Prepare(grpc::ClientContext& context) const;

  const Options options_;
  const absl::Status unusable_;
  std::unique_ptr<tessera::v1::JobService::Stub> stub_;
};

// Largest reply tessctl accepts (job lists, metric pages).
inline constexpr int kMaxReplyBytes = 64 << 20;

// Where and how tessctl connects.
struct ConnectionOptions {
  std::string address;  // "host:port"
  std::string token;    // empty: send no authorization metadata
  // TLS (see ResolveClientTls in common/tls.h): the PEM roots that
  // verify the coordinator (default: $TESSERA_TLS_CA), or the SHA-256 pin of its
  // self-signed certificate (default: $TESSERA_TLS_PIN, then the pin the token
  // carries). None: plaintext.
  std::string tls_ca_file;
  std::string tls_pin;
};

inline constexpr char kTlsCaEnv[] = "TESSERA_TLS_CA";
inline constexpr char kTlsPinEnv[] = "TESSERA_TLS_PIN";

// Every stored point of a job with step > `after_step` (and name `name` if
// non-empty), fetched with GetMetrics in pages. ResourceExhausted past 5,000,000
// points (select one metric by name).
absl::StatusOr<std::vector<tessera::v1::MetricPoint>> FetchMetrics(
    CoordinatorClient& client, int64_t job_id, int64_t after_step,
    const std::string& name);

// A client over a channel to `connection.address`. Connecting is lazy: an
// unreachable address shows up as Unavailable from the first call. With a pin,
// the certificate is fetched and checked here; when that fails, every call
// answers FailedPrecondition ("TLS: ...").
std::unique_ptr<CoordinatorClient> MakeCoordinatorClient(
    const ConnectionOptions& connection, absl::Duration rpc_timeout = absl::Seconds(10));

}  // namespace tessera::cli

#endif  // TESSERA_CLI_CLIENT_H_
