// RendezvousClient: how a rank joins its job's attempt and learns its rank,
// world size and rank 0's bootstrap. The process group (process_group.h) needs
// only this of the coordinator; run/coordinator_client.h extends it with
// metrics, leases and the result, and grpc_coordinator_client.h implements it.
#ifndef TESSERA_WORKER_TRAINER_DIST_RENDEZVOUS_CLIENT_H_
#define TESSERA_WORKER_TRAINER_DIST_RENDEZVOUS_CLIENT_H_

#include <string>

#include "absl/status/statusor.h"

namespace tessera::trainer {

// What the coordinator answers every rank once all ranks have joined.
struct RendezvousResult {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int attempt = 0;
  std::string bootstrap;  // rank 0's bootstrap, e.g. "host:port" of its TCPStore
  std::string backend;    // "gloo" or "nccl"
};

class RendezvousClient {
 public:
  virtual ~RendezvousClient() = default;

  // Joins the attempt. Rank 0 passes its bootstrap; the others pass an empty one.
  // Blocks until every rank has joined (or the implementation's deadline).
  virtual absl::StatusOr<RendezvousResult> Rendezvous(const std::string& bootstrap,
                                                      const std::string& backend) = 0;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_RENDEZVOUS_CLIENT_H_
