#include "worker/trainer/dist/net_util.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tessera::trainer {

absl::StatusOr<HostPort> ParseHostPort(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not of the form host:port"));
  }
  std::string host = text.substr(0, colon);
  const std::string port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", text, "\": write IPv6 addresses in brackets, e.g. [::1]:50051"));
  }
  int port = -1;
  if (host.empty() || !absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", text, "\" is not of the form host:port with port in [0, 65535]"));
  }
  return HostPort{host, port};
}

std::string FormatHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<std::string> LocalAddressFor(const HostPort& peer) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* results = nullptr;
  // The port only has to be non-zero for connect(); nothing is sent.
  const std::string service = std::to_string(peer.port > 0 ? peer.port : 9);
  const int rc = getaddrinfo(peer.host.c_str(), service.c_str(), &hints, &results);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", peer.host, ": ", gai_strerror(rc)));
  }
  std::string last_error = "no addresses";
  for (addrinfo* ai = results; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) {
      last_error = std::strerror(errno);
      close(fd);
      continue;
    }
    close(fd);
    char buffer[INET6_ADDRSTRLEN] = {};
    const void* address =
        local.ss_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
            : static_cast<const void*>(
                  &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
    if (inet_ntop(local.ss_family, address, buffer, sizeof(buffer)) == nullptr) {
      last_error = std::strerror(errno);
      continue;
    }
    freeaddrinfo(results);
    return std::string(buffer);
  }
  freeaddrinfo(results);
  return absl::UnavailableError(
      absl::StrCat("no local route to ", peer.host, ": ", last_error));
}

}  // namespace tessera::trainer
