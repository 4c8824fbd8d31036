// Communicator over Gloo (c10d::ProcessGroupGloo), for CPU ranks.
//
// Bootstrap: the ranks meet through a RendezvousStore (rendezvous_store.h).
// Each rank hands its store to GlooCommunicator::Create, which connects the full Gloo
// mesh over the device bound to `local_address` and returns once every rank has done the
// same.
//
// c10d types stay in the .cc (pimpl) so this header is cheap to include. c10d
// reports failures with exceptions; every one is caught here and returned as a
// status that names the collective ("allreduce #412 (bucket 3)"): Unavailable
// for a peer that went away, DeadlineExceeded for timeouts.
//
// Timeouts: a collective timeout (collective_timeout.h) fires when a
// collective has been pending for GlooOptions::timeout; it aborts the
// communicator and calls on_collective_failure with a reason naming the
// collective. Gloo's own limit per operation is set a little later
// (GlooOperationTimeout), so the collective timeout acts first; Gloo's then frees the
// call that waits, which fails with the collective timeout's reason. A collective counts
// as pending from its launch until it has been waited for. Gloo reports other
// errors (a peer that closed its connection) only to that call; such a failure
// aborts the communicator the same way, with a reason naming the collective.
// Either way on_collective_failure is called once.
//
// Reduce-scatter and all-gather are built on the group's point-to-point sends
// and receives (LibTorch's Gloo group has neither collective), on a thread of
// the communicator's, each rank sending (N-1)/N of the buffer, as NCCL's ring
// does. The reduce-scatter sends each rank its chunk directly and sums it in
// rank order (so an element's sum does not depend on where the bucket layout
// puts it); the all-gather is a ring of N-1 steps. They are tracked and timed
// out like the all-reduce.
//
// Only in builds whose LibTorch has Gloo's headers (TESSERA_HAVE_GLOO; pip's
// wheels ship none): process_group.cc asks GlooBackendAvailable() first.
//
// Thread-safety: as Communicator.
#ifndef TESSERA_WORKER_TRAINER_DIST_GLOO_COMMUNICATOR_H_
#define TESSERA_WORKER_TRAINER_DIST_GLOO_COMMUNICATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/dist/rendezvous_store.h"

namespace tessera::trainer {

struct GlooOptions {
  // Address of the local interface the Gloo device binds to; peers connect to
  // it. Normally the address used to reach the coordinator or store.
  std::string local_address = "127.0.0.1";
  // Limit for connecting the mesh and for each collective (the collective timeout's
  // timeout; --collective-timeout).
  absl::Duration timeout = absl::Minutes(5);
  // Time between two checks of the collective timeout.
  absl::Duration timeout_poll_interval = absl::Milliseconds(100);
  // Called once, after a collective timed out (on the collective timeout's thread) or
  // failed (on the thread that waited for it) and the communicator was
  // aborted, with the reason; tessera-train exits there
  // (ExitOnCollectiveFailure). Unset: the call waiting for the collective
  // fails with the reason.
  std::function<void(const std::string& reason)> on_collective_failure;
  // Gloo worker threads of the process group.
  int threads = 2;
  // With two ranks an all-reduce is one exchange: each rank sends its whole
  // tensor to the other and adds what it receives. a + b == b + a bit for bit,
  // so both ranks hold the same sum. Gloo's ring takes two dependent rounds
  // (reduce-scatter, then all-gather) for the same bytes, which doubles the
  // latency that a small last bucket leaves exposed after backward. Off: Gloo's
  // allreduce at every world size.
  bool pairwise_exchange = true;
  // With three ranks or more an all-reduce is the communicator's own
  // reduce-scatter, then its all-gather (above): every element is summed in
  // rank order, so every ZeRO stage and bucket layout sums a gradient
  // exactly as stage 0. Off: Gloo's allreduce.
  bool sharded_ring = true;
};

// Gloo's own limit for one operation (and for connecting the mesh): `timeout`
// plus max(1 s, timeout / 10), so that the collective timeout fires first.
absl::Duration GlooOperationTimeout(absl::Duration timeout);

class GlooCommunicator final : public Communicator {
 public:
  // Joins the group of `world_size` ranks meeting in `store`, which the
  // communicator keeps (rank 0's store must outlive the others' connections).
  // Blocks until every rank has joined or options.timeout has passed.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Create(
      std::unique_ptr<RendezvousStore> store, int rank, int world_size,
      const GlooOptions& options);

  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string backend() const override { return "gloo"; }
  // How AllReduceSumAsync combines: "pairwise-exchange" (two ranks, see
  // GlooOptions::pairwise_exchange), "reduce-scatter-all-gather" (three or
  // more, GlooOptions::sharded_ring) or "ring" (Gloo's allreduce).
  std::string allreduce_algorithm() const;
  absl::Status Broadcast(at::Tensor& tensor, int root) override;
  absl::Status Barrier() override;
  // Gloo has no abort: pending and later collectives fail with the reason, and
  // the destructor leaves the process group to the process's exit, since its
  // teardown waits for queued work.
  void Abort() override;
  const PendingCollectiveTracker* collectives() const override;

  // Why the communicator was aborted (the collective timeout's reason); nullopt if not.
  std::optional<std::string> abort_reason() const;
  int64_t bytes_sent() const override;

 private:
  struct Impl;  // Holds the process group; defined in the .cc.

  // Queued on the group's worker threads; several may be in flight at once.
  std::unique_ptr<PendingCollective> StartAllReduceSum(at::Tensor& tensor,
                                                       int bucket) override;
  // Rings over the group's sends and receives (c10d's Gloo group has neither
  // collective), run in issue order on a thread of the communicator's.
  std::unique_ptr<PendingCollective> StartReduceScatterSum(at::Tensor& buffer,
                                                           int bucket) override;
  std::unique_ptr<PendingCollective> StartAllGather(at::Tensor& buffer,
                                                    int bucket) override;
  enum class RingKind { kReduceScatter, kAllGather, kAllReduce };
  std::unique_ptr<PendingCollective> StartRing(at::Tensor& buffer, int bucket,
                                               RingKind kind);
  GlooCommunicator(int rank, int world_size, std::unique_ptr<RendezvousStore> store,
                   std::unique_ptr<Impl> impl);

  const int rank_;
  const int world_size_;
  std::unique_ptr<RendezvousStore> store_;
  std::unique_ptr<Impl> impl_;  // Declared after store_: destroyed first.
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_GLOO_COMMUNICATOR_H_
