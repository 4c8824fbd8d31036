// What the Gloo backend needs of a RendezvousStore's insides, and the
// conversion of c10d's exceptions to statuses that both use. Included only by
// rendezvous_store.cc and gloo_communicator.cc: it pulls in c10d's headers.
#ifndef TESSERA_WORKER_TRAINER_DIST_RENDEZVOUS_STORE_INTERNAL_H_
#define TESSERA_WORKER_TRAINER_DIST_RENDEZVOUS_STORE_INTERNAL_H_

#include <chrono>
#include <exception>
#include <string>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "worker/trainer/dist/rendezvous_store.h"

namespace tessera::trainer {

struct RendezvousStore::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
  std::string host;
};

inline std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// c10d and Gloo signal every failure with an exception whose text is the only
// classification available: DeadlineExceeded for timeouts, Unavailable for a
// peer that went away, Internal otherwise; `what` names the operation.
absl::Status C10dErrorToStatus(const std::exception& e, const std::string& what);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_RENDEZVOUS_STORE_INTERNAL_H_
