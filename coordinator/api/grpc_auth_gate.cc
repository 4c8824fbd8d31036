#include "coordinator/api/grpc_auth_gate.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tessera/v1/tessera.grpc.pb.h"

namespace tessera {

namespace {

std::string_view SliceText(const grpc_slice& slice) {
  return std::string_view(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(slice)),
                          GRPC_SLICE_LENGTH(slice));
}

// "/pkg.Service/Method" -> "pkg.Service"; empty when `method` has another form.
absl::string_view ServiceOf(absl::string_view method) {
  if (method.size() < 2 || method[0] != '/') return {};
  const size_t slash = method.find('/', 1);
  return slash == absl::string_view::npos ? absl::string_view()
                                          : method.substr(1, slash - 1);
}

}  // namespace

// ServerCredentials over the C core's credentials with the gate as their auth
// metadata processor. gRPC's Server calls AddPortToServer (a private virtual
// of the base class) for each listening port.
class GatedServerCredentials final : public grpc::ServerCredentials {
 public:
  GatedServerCredentials(std::shared_ptr<GrpcAuthGate> gate, const TlsIdentity& tls)
      : gate_(std::move(gate)), tls_(tls) {}

  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {
    // The gate is these credentials' processor; nothing else may replace it.
  }

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    grpc_server_credentials* creds = nullptr;
    if (tls_.enabled()) {
      grpc_ssl_pem_key_cert_pair pair{tls_.key_pem.c_str(), tls_.cert_pem.c_str()};
      creds = grpc_ssl_server_credentials_create_ex(
          nullptr, &pair, 1, GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE, nullptr);
    } else {
      creds = grpc_insecure_server_credentials_create();
    }
    if (creds == nullptr) return 0;
    grpc_server_credentials_set_auth_metadata_processor(
        creds, grpc_auth_metadata_processor{&ProcessCall, &DestroyState,
                                            new std::shared_ptr<GrpcAuthGate>(gate_)});
    const int port = grpc_server_add_http2_port(server, addr.c_str(), creds);
    grpc_server_credentials_release(creds);
    return port;
  }

  // Runs on a gRPC thread with the call's initial metadata.
  static void ProcessCall(void* state, grpc_auth_context*, const grpc_metadata* md,
                          size_t num_md, grpc_process_auth_metadata_done_cb cb,
                          void* user_data) {
    GrpcAuthGate& gate = **static_cast<std::shared_ptr<GrpcAuthGate>*>(state);
    std::string method;
    std::string authorization;
    for (size_t i = 0; i < num_md; ++i) {
      const std::string_view key = SliceText(md[i].key);
      if (key == ":path") method = std::string(SliceText(md[i].value));
      if (key == "authorization") authorization = std::string(SliceText(md[i].value));
    }
    gate.Process(std::move(method), std::move(authorization),
                 [cb, user_data](const absl::Status& status) {
                   // absl and gRPC share the canonical status codes.
                   const std::string details(status.message());
                   cb(user_data, nullptr, 0, nullptr, 0,
                      static_cast<grpc_status_code>(status.code()),
                      status.ok() ? nullptr : details.c_str());
                 });
  }

  static void DestroyState(void* state) {
    delete static_cast<std::shared_ptr<GrpcAuthGate>*>(state);
  }

  const std::shared_ptr<GrpcAuthGate> gate_;
  const TlsIdentity tls_;
};

GrpcAuthGate::GrpcAuthGate(Check check, Options options)
    : check_(std::move(check)), pool_(options.threads, options.max_queued) {}

GrpcAuthGate::~GrpcAuthGate() { Stop(); }

std::shared_ptr<grpc::ServerCredentials> GrpcAuthGate::Credentials(
    std::shared_ptr<GrpcAuthGate> gate, const TlsIdentity& tls) {
  return std::make_shared<GatedServerCredentials>(std::move(gate), tls);
}

void GrpcAuthGate::Process(std::string method, std::string authorization,
                           std::function<void(const absl::Status&)> done) {
  const bool queued = pool_.TrySubmit(
      [this, method = std::move(method), authorization = std::move(authorization), done] {
        absl::Status status = check_(method, authorization);
        if (!status.ok()) refused_.fetch_add(1);
        done(status);
      });
  if (queued) return;
  refused_.fetch_add(1);
  done(absl::ResourceExhaustedError(
      "too many calls are waiting to be authenticated; retry in a moment"));
}

GrpcAuthGate::Check CoordinatorCallCheck(Authenticator* auth) {
  return
      [auth](absl::string_view method, absl::string_view authorization) -> absl::Status {
        if (!auth->enabled()) return absl::OkStatus();
        const absl::string_view service = ServiceOf(method);
        if (service == "grpc.health.v1.Health") return absl::OkStatus();
        if (service == v1::WorkerService::service_full_name()) {
          return auth->Authenticate(authorization, kJoinToken).status();
        }
        if (service == v1::TrainerService::service_full_name()) {
          // A valid, unexpired credential for the scope it names passes; the
          // handler, which has the request, checks that scope against it.
          int64_t job = 0;
          int32_t attempt = 0, rank = 0;
          std::vector<absl::string_view> parts = absl::StrSplit(authorization, '_');
          if (parts.size() == 7) {
            (void)absl::SimpleAtoi(parts[2], &job);
            (void)absl::SimpleAtoi(parts[3], &attempt);
            (void)absl::SimpleAtoi(parts[4], &rank);
          }
          return auth->CheckTrainer(authorization, job, attempt, rank);
        }
        return auth->Authenticate(authorization, kUserToken).status();
      };
}

}  // namespace tessera
