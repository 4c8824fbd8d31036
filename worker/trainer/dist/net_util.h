// Small network helpers for the trainer's rendezvous: "host:port" parsing and
// finding the local address this machine uses to reach a peer (rank 0 advertises
// that address for its TCPStore, and Gloo binds to it).
//
// Free functions without shared state: thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DIST_NET_UTIL_H_
#define TESSERA_WORKER_TRAINER_DIST_NET_UTIL_H_

#include <string>

#include "absl/status/statusor.h"

namespace tessera::trainer {

struct HostPort {
  std::string host;  // name or address, IPv6 without brackets
  int port = 0;
};

// Parses "host:port" or "[v6addr]:port"; InvalidArgument naming the input when
// the host is empty or the port is not in [0, 65535].
absl::StatusOr<HostPort> ParseHostPort(const std::string& text);

// "host:port", with brackets around IPv6 addresses.
std::string FormatHostPort(const std::string& host, int port);

// The numeric address of the local interface the kernel routes to `peer` over:
// connects a UDP socket (which sends nothing) and reads its name back. For
// 127.0.0.1 this is 127.0.0.1. Unavailable when the name does not resolve or no
// route exists.
absl::StatusOr<std::string> LocalAddressFor(const HostPort& peer);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_NET_UTIL_H_
