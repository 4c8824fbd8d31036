// Conversions between absl::Status (used inside every component) and
// grpc::Status (used only at the RPC edge: *_service.cc and clients).
//
// Thread-safety: free functions without state.
#ifndef TESSERA_COMMON_GRPC_STATUS_H_
#define TESSERA_COMMON_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"

namespace tessera {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// The call's "authorization" metadata value, empty when absent.
inline std::string AuthorizationOf(const grpc::ServerContextBase& context) {
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  return it == md.end() ? std::string()
                        : std::string(it->second.data(), it->second.size());
}

}  // namespace tessera

#endif  // TESSERA_COMMON_GRPC_STATUS_H_
