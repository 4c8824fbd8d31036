// gRPC channel credentials for a ClientTls (tls.h): the one place clients of
// the coordinator (tessctl, the worker, the trainer, tests) turn a TLS decision
// into a channel. Header-only, so that targets without tessera_tls (the
// trainer) can use it with a ClientTls they fill themselves.
#ifndef TESSERA_COMMON_GRPC_TLS_H_
#define TESSERA_COMMON_GRPC_TLS_H_

#include <grpcpp/grpcpp.h>

#include <memory>

#include "common/tls.h"

namespace tessera {

// Plaintext credentials when `tls` is not enabled; otherwise TLS trusting only
// tls.root_pem, with `args` told to check tls.server_name (when set) instead of
// the dialled host.
inline std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(
    const ClientTls& tls, grpc::ChannelArguments& args) {
  if (!tls.enabled) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tls.root_pem;
  if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
  return grpc::SslCredentials(ssl);
}

}  // namespace tessera

#endif  // TESSERA_COMMON_GRPC_TLS_H_
