#include "worker/trainer/dist/rendezvous_store.h"

#include <torch/version.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "worker/trainer/dist/net_util.h"
#include "worker/trainer/dist/rendezvous_store_internal.h"

namespace tessera::trainer {

absl::Status C10dErrorToStatus(const std::exception& e, const std::string& what) {
  const std::string message = e.what();
  const std::string lower = absl::AsciiStrToLower(message);
  const std::string text = absl::StrCat(what, ": ", message);
  if (absl::StrContains(lower, "timed out") || absl::StrContains(lower, "timeout")) {
    return absl::DeadlineExceededError(text);
  }
  if (absl::StrContains(lower, "connection") || absl::StrContains(lower, "peer") ||
      absl::StrContains(lower, "socket") || absl::StrContains(lower, "refused")) {
    return absl::UnavailableError(text);
  }
  return absl::InternalError(text);
}

namespace {

// LibTorch >= 2.4 asks for the libuv store backend by default, and a LibTorch
// built without libuv (Debian's 2.6) then throws from the TCPStore
// constructor. The classic backend is in every build.
void UseClassicStoreBackend(c10d::TCPStoreOptions& options) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  options.useLibUV = false;
#else
  (void)options;  // no libuv backend before 2.2
#endif
}

}  // namespace

RendezvousStore::RendezvousStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RendezvousStore::~RendezvousStore() = default;

absl::StatusOr<std::unique_ptr<RendezvousStore>> RendezvousStore::Host(
    const std::string& advertise_host, int port, absl::Duration timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = true;
  // Other ranks learn the address only after the coordinator answers, so the
  // server must not wait for them here.
  options.numWorkers = c10::nullopt;
  options.waitWorkers = false;
  options.timeout = ToChrono(timeout);
  UseClassicStoreBackend(options);
  try {
    auto impl = std::make_unique<Impl>();
    impl->store = c10::make_intrusive<c10d::TCPStore>(advertise_host, options);
    impl->host = advertise_host;
    if (impl->store->getPort() == 0) {
      return absl::InternalError("TCPStore did not report the port it bound");
    }
    return std::unique_ptr<RendezvousStore>(new RendezvousStore(std::move(impl)));
  } catch (const std::exception& e) {
    return C10dErrorToStatus(e, absl::StrCat("hosting a TCPStore on port ", port));
  }
}

absl::StatusOr<std::unique_ptr<RendezvousStore>> RendezvousStore::Connect(
    const std::string& host, int port, absl::Duration timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = false;
  options.timeout = ToChrono(timeout);
  UseClassicStoreBackend(options);
  try {
    auto impl = std::make_unique<Impl>();
    impl->store = c10::make_intrusive<c10d::TCPStore>(host, options);
    impl->host = host;
    return std::unique_ptr<RendezvousStore>(new RendezvousStore(std::move(impl)));
  } catch (const std::exception& e) {
    return C10dErrorToStatus(
        e, absl::StrCat("connecting to the TCPStore at ", FormatHostPort(host, port)));
  }
}

int RendezvousStore::port() const { return impl_->store->getPort(); }

absl::Status RendezvousStore::Set(const std::string& key, const std::string& value) {
  try {
    impl_->store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return C10dErrorToStatus(e, absl::StrCat("setting store key ", key));
  }
}

absl::StatusOr<std::string> RendezvousStore::Get(const std::string& key) {
  try {
    const std::vector<uint8_t> value = impl_->store->get(key);
    return std::string(value.begin(), value.end());
  } catch (const std::exception& e) {
    return C10dErrorToStatus(e, absl::StrCat("getting store key ", key));
  }
}

std::string RendezvousStore::address() const {
  return FormatHostPort(impl_->host, port());
}

}  // namespace tessera::trainer
