#include "coordinator/api/http_server.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <atomic>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "httplib.h"

namespace tessera {

namespace {

// An EventSink over cpp-httplib's chunked response writer.
class ChunkSink : public EventSink {
 public:
  explicit ChunkSink(httplib::DataSink& sink) : sink_(sink) {}
  bool Write(std::string_view data) override {
    return sink_.is_writable() && sink_.write(data.data(), data.size());
  }

 private:
  httplib::DataSink& sink_;
};

// Loads `tls` (certificate chain and key, PEM) into an httplib SSL context.
bool SetUpSslContext(SSL_CTX& ctx, const TlsIdentity& tls) {
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(
      &ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
  BIO* certs =
      BIO_new_mem_buf(tls.cert_pem.data(), static_cast<int>(tls.cert_pem.size()));
  bool ok = certs != nullptr;
  if (ok) {
    X509* leaf = PEM_read_bio_X509(certs, nullptr, nullptr, nullptr);
    ok = leaf != nullptr && SSL_CTX_use_certificate(&ctx, leaf) == 1;
    X509_free(leaf);
    // Intermediates, if the operator's file has them.
    while (ok) {
      X509* next = PEM_read_bio_X509(certs, nullptr, nullptr, nullptr);
      if (next == nullptr) break;
      ok = SSL_CTX_add0_chain_cert(&ctx, next) == 1;
      if (!ok) X509_free(next);
    }
    BIO_free(certs);
  }
  BIO* key_bio =
      BIO_new_mem_buf(tls.key_pem.data(), static_cast<int>(tls.key_pem.size()));
  EVP_PKEY* key = key_bio != nullptr
                      ? PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr)
                      : nullptr;
  ok = ok && key != nullptr && SSL_CTX_use_PrivateKey(&ctx, key) == 1 &&
       SSL_CTX_check_private_key(&ctx) == 1;
  EVP_PKEY_free(key);
  BIO_free(key_bio);
  ERR_clear_error();
  return ok;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address,
                                                              const HttpApi* api,
                                                              int max_streams,
                                                              const TlsIdentity& tls) {
  size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http: expected HOST:PORT, got '", address, "'"));
  }
  std::string host = address.substr(0, colon);
  std::unique_ptr<HttpServer> s(new HttpServer());
  if (tls.enabled()) {
    auto ssl = std::make_unique<httplib::SSLServer>(
        [&tls](SSL_CTX& ctx) { return SetUpSslContext(ctx, tls); });
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(
          "HTTPS: OpenSSL refused the TLS certificate or key");
    }
    s->server_ = std::move(ssl);
  } else {
    s->server_ = std::make_unique<httplib::Server>();
  }
  // Every open event stream holds a thread; the reserve serves plain requests.
  constexpr int kReserveThreads = 8;
  const int threads = std::max(1, max_streams) + kReserveThreads;
  s->server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // Idle keep-alive connections hold a thread too; let them go soon.
  s->server_->set_keep_alive_timeout(2);
  s->server_->set_payload_max_length(1 << 20);
  s->server_->set_default_headers(
      {{"Content-Security-Policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; "
        "form-action 'none'"},
       {"X-Content-Type-Options", "nosniff"},
       {"Referrer-Policy", "no-referrer"}});
  auto handler = [api](const httplib::Request& req, httplib::Response& res) {
    HttpRequest r;
    r.method = req.method;
    r.path = req.path;
    for (const auto& [k, v] : req.params) r.query.emplace(k, v);
    for (const auto& [k, v] : req.headers) r.headers.emplace(absl::AsciiStrToLower(k), v);
    r.body = req.body;
    HttpResponse out = api->Handle(r);
    res.status = out.status;
    for (const auto& [k, v] : out.headers) res.set_header(k, v);
    if (out.stream) {
      auto stream = std::move(out.stream);
      res.set_chunked_content_provider(out.content_type,
                                       [stream](size_t, httplib::DataSink& sink) {
                                         ChunkSink events(sink);
                                         stream(events);
                                         sink.done();
                                         return true;
                                       });
      return;
    }
    res.set_content(out.body, out.content_type.c_str());
  };
  s->server_->Get(R"(/.*)", handler);
  s->server_->Post(R"(/.*)", handler);
  s->server_->Delete(R"(/.*)", handler);
  s->server_->Put(R"(/.*)", handler);
  if (port == 0) {
    s->port_ = s->server_->bind_to_any_port(host);
  } else if (s->server_->bind_to_port(host, port)) {
    s->port_ = port;
  }
  if (s->port_ <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot listen on ", address, " (HTTP): the address is in use or not available"));
  }
  httplib::Server* raw = s->server_.get();
  std::atomic<bool>* done = &s->listen_done_;
  s->thread_ = std::thread([raw, done] {
    raw->listen_after_bind();
    done->store(true);
  });
  return s;
}

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  // httplib's stop() does nothing until the listening thread has marked the
  // server running; that thread would then block in accept() for good (a Stop
  // right after Start hung). So wait for it to run (or to have ended), then
  // stop it once.
  while (!listen_done_.load()) {
    if (server_->is_running()) {
      server_->stop();
      break;
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  thread_.join();
}

HttpServer::~HttpServer() { Stop(); }

}  // namespace tessera
