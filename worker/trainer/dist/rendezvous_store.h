// The store the ranks of a job meet through: a c10d TCPStore client, plus the
// server when this process hosts it. Rank 0 hosts one (port 0 lets the kernel
// choose) and advertises its address(); the other ranks Connect to it. The
// Gloo backend builds its process group over it, and the NCCL backend of a
// --rendezvous-store run publishes its unique id in it. It needs no Gloo
// headers, so it is in every build, also against a LibTorch that ships none.
//
// Thread-safety: used by one thread at a time.
#ifndef TESSERA_WORKER_TRAINER_DIST_RENDEZVOUS_STORE_H_
#define TESSERA_WORKER_TRAINER_DIST_RENDEZVOUS_STORE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera::trainer {

class RendezvousStore {
 public:
  // Starts a store server listening on all interfaces at `port` (0: any free
  // port) and connects to it. `advertise_host` is the address other ranks use to
  // reach this machine; address() returns it with the bound port.
  static absl::StatusOr<std::unique_ptr<RendezvousStore>> Host(
      const std::string& advertise_host, int port, absl::Duration timeout);

  // Connects to a store at host:port, retrying until `timeout`.
  static absl::StatusOr<std::unique_ptr<RendezvousStore>> Connect(const std::string& host,
                                                                  int port,
                                                                  absl::Duration timeout);

  ~RendezvousStore();
  RendezvousStore(const RendezvousStore&) = delete;
  RendezvousStore& operator=(const RendezvousStore&) = delete;

  // The port the store listens on (for a hosted store, the one actually bound).
  int port() const;
  // "host:port" of the store.
  std::string address() const;

  // Sets `key` to `value` in the store (e.g. rank 0 publishing an NCCL id).
  absl::Status Set(const std::string& key, const std::string& value);
  // The value of `key`, waiting up to the store's timeout for some rank to set it.
  absl::StatusOr<std::string> Get(const std::string& key);

 private:
  struct Impl;  // Holds the c10d store; defined in the .cc.
  explicit RendezvousStore(std::unique_ptr<Impl> impl);

  friend class GlooCommunicator;  // joins its process group over the c10d store
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_RENDEZVOUS_STORE_H_
