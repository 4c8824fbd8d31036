#include "worker/trainer/dist/gloo_communicator.h"

#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "worker/trainer/dist/bucket_plan.h"
#include "worker/trainer/dist/collective_timeout.h"
#include "worker/trainer/dist/net_util.h"
#include "worker/trainer/dist/pending_collective_tracker.h"
#include "worker/trainer/dist/rendezvous_store_internal.h"

namespace tessera::trainer {

// Receive buffers of the pairwise exchange, kept by (dtype, element count) so
// that the same gradient buckets reuse the same memory every step instead of
// faulting in fresh pages. Bounded: a size seen more than kPerSize times at once
// or beyond kSizes distinct sizes is allocated and freed per use.
class ScratchPool {
 public:
  at::Tensor Acquire(const at::Tensor& like) {
    {
      absl::MutexLock lock(&mu_);
      auto it = free_.find(Key(like));
      if (it != free_.end() && !it->second.empty()) {
        at::Tensor buffer = std::move(it->second.back());
        it->second.pop_back();
        return buffer;
      }
    }
    return at::empty_like(like, at::MemoryFormat::Contiguous);
  }

  void Release(at::Tensor buffer) {
    absl::MutexLock lock(&mu_);
    const auto key = Key(buffer);
    auto it = free_.find(key);
    if (it == free_.end()) {
      if (free_.size() >= kSizes) return;
      it = free_.emplace(key, std::vector<at::Tensor>()).first;
    }
    if (it->second.size() < kPerSize) it->second.push_back(std::move(buffer));
  }

 private:
  static constexpr size_t kSizes = 64;
  static constexpr size_t kPerSize = 2;
  using KeyType = std::pair<int, int64_t>;
  static KeyType Key(const at::Tensor& t) {
    return {static_cast<int>(t.scalar_type()), t.numel()};
  }

  absl::Mutex mu_;
  std::map<KeyType, std::vector<at::Tensor>> free_ ABSL_GUARDED_BY(mu_);
};

namespace {

// A communicator's collectives: the tracker its collective timeout ages, the reason it
// was aborted, and the handler told when a collective fails. Shared with the
// launched collectives, which may outlive the communicator. Thread-safe.
class GlooCollectives {
 public:
  using OnFailure = std::function<void(const std::string& reason)>;

  explicit GlooCollectives(OnFailure on_failure)
      : tracker_(clock_), on_failure_(std::move(on_failure)) {}
  GlooCollectives(const GlooCollectives&) = delete;
  GlooCollectives& operator=(const GlooCollectives&) = delete;

  const Clock& clock() const { return clock_; }
  PendingCollectiveTracker& tracker() { return tracker_; }

  // Marks the communicator aborted for `reason`; false if it already was (the
  // first reason stays).
  bool Abort(const std::string& reason) {
    absl::MutexLock lock(&mu_);
    if (abort_reason_.has_value()) return false;
    abort_reason_ = reason;
    return true;
  }

  // A collective failed or timed out: aborts, and tells the handler once.
  void Fail(const std::string& reason) {
    if (Abort(reason) && on_failure_) on_failure_(reason);
  }

  std::optional<std::string> abort_reason() const {
    absl::MutexLock lock(&mu_);
    return abort_reason_;
  }

  // FailedPrecondition with the reason once aborted: no new collective starts.
  absl::Status CheckUsable() const {
    const std::optional<std::string> reason = abort_reason();
    if (!reason.has_value()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("the Gloo communicator was aborted: ", *reason));
  }

 private:
  RealClock clock_;
  PendingCollectiveTracker tracker_;
  const OnFailure on_failure_;

  mutable absl::Mutex mu_;
  std::optional<std::string> abort_reason_ ABSL_GUARDED_BY(mu_);
};

// One collective in the tracker from construction until End (or destruction).
// Used by one thread at a time.
class TrackedCollective {
 public:
  TrackedCollective(std::shared_ptr<GlooCollectives> collectives, absl::string_view name,
                    int bucket)
      : collectives_(std::move(collectives)),
        sequence_(collectives_->tracker().Begin(name, bucket)),
        description_(DescribeCollective(
            {.sequence = sequence_, .name = std::string(name), .bucket = bucket})) {}
  ~TrackedCollective() { End(); }
  TrackedCollective(const TrackedCollective&) = delete;
  TrackedCollective& operator=(const TrackedCollective&) = delete;

  void End() {
    if (ended_) return;
    ended_ = true;
    collectives_->tracker().End(sequence_);
  }

  // Ends the collective and returns its outcome. A failure after the
  // communicator was aborted carries that reason (the collective timeout's); any other
  // fails the communicator as the collective timeout would, naming this collective.
  absl::Status Finish(absl::Status status) {
    End();
    if (status.ok()) return status;
    if (const std::optional<std::string> reason = collectives_->abort_reason()) {
      return absl::Status(status.code(), absl::StrCat(*reason, "; ", status.message()));
    }
    const std::string reason =
        absl::StrCat("collective failed: ", description_, ": ", status.message());
    collectives_->Fail(reason);
    return absl::Status(status.code(), reason);
  }

 private:
  const std::shared_ptr<GlooCollectives> collectives_;
  const uint64_t sequence_;
  const std::string description_;
  bool ended_ = false;
};

}  // namespace

// Runs the ring collectives (reduce-scatter, all-gather) one after another on
// a thread of its own, in the order they were issued, so that they overlap
// the issuing thread's work as the process group's own collectives do. Each
// ring step hands the next a chunk it has just received, so a ring is a chain
// of dependent sends and receives that no c10d call runs by itself.
// Thread-safe. The state is shared with the thread, which an aborted
// communicator leaves behind (detached) rather than wait on a peer that is gone.
class RingExecutor {
 public:
  // The outcome of one submitted ring, set once by the thread.
  class Job {
   public:
    absl::Status Await() {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&done_));
      return status_;
    }
    void Finish(absl::Status status) {
      absl::MutexLock lock(&mu_);
      status_ = std::move(status);
      done_ = true;
    }

   private:
    absl::Mutex mu_;
    bool done_ ABSL_GUARDED_BY(mu_) = false;
    absl::Status status_ ABSL_GUARDED_BY(mu_);
  };

  RingExecutor() : state_(std::make_shared<State>()) {}
  RingExecutor(const RingExecutor&) = delete;
  RingExecutor& operator=(const RingExecutor&) = delete;

  // Stops after the queued rings; `abandon`: leaves them to the thread, detached.
  void Stop(bool abandon) {
    {
      absl::MutexLock lock(&state_->mu);
      state_->stopping = true;
    }
    if (!thread_.joinable()) return;
    if (abandon) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }
  ~RingExecutor() { Stop(/*abandon=*/false); }

  std::shared_ptr<Job> Submit(std::function<absl::Status()> ring) {
    auto job = std::make_shared<Job>();
    absl::MutexLock lock(&state_->mu);
    state_->queue.emplace_back(job, std::move(ring));
    if (!thread_.joinable()) thread_ = std::thread([state = state_] { Loop(*state); });
    return job;
  }

 private:
  struct State {
    absl::Mutex mu;
    std::deque<std::pair<std::shared_ptr<Job>, std::function<absl::Status()>>> queue
        ABSL_GUARDED_BY(mu);
    bool stopping ABSL_GUARDED_BY(mu) = false;
    bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return stopping || !queue.empty();
    }
  };

  static void Loop(State& state) {
    while (true) {
      std::pair<std::shared_ptr<Job>, std::function<absl::Status()>> next;
      {
        absl::MutexLock lock(&state.mu);
        state.mu.Await(absl::Condition(&state, &State::Ready));
        if (state.queue.empty()) return;
        next = std::move(state.queue.front());
        state.queue.pop_front();
      }
      next.first->Finish(next.second());
    }
  }

  const std::shared_ptr<State> state_;
  std::thread thread_;
};

struct GlooCommunicator::Impl {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
  bool pairwise_exchange = false;
  bool sharded_ring = false;
  // Send/receive tag of the next exchange (a ring takes one per step). Every
  // rank issues collectives in the same order, so the counters agree.
  uint32_t next_tag = 0;
  std::shared_ptr<ScratchPool> scratch = std::make_shared<ScratchPool>();
  std::shared_ptr<GlooCollectives> collectives;
  // Bytes handed to the transport, shared with the ring thread.
  std::shared_ptr<std::atomic<int64_t>> bytes_sent =
      std::make_shared<std::atomic<int64_t>>(0);
  RingExecutor rings;
  // Last: its thread ages `collectives` and is joined first.
  std::unique_ptr<CollectiveTimeout> collective_timeout;
};

namespace {

absl::Status CheckCollectiveTensor(const at::Tensor& tensor) {
  if (!tensor.defined()) return absl::InvalidArgumentError("undefined tensor");
  if (!tensor.device().is_cpu()) {
    return absl::InvalidArgumentError("Gloo collectives here take CPU tensors");
  }
  if (!tensor.is_contiguous()) {
    return absl::InvalidArgumentError("collective tensor must be contiguous");
  }
  const auto type = tensor.scalar_type();
  if (type != at::kFloat && type != at::kDouble && type != at::kLong) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported collective dtype ", c10::toString(type)));
  }
  return absl::OkStatus();
}

}  // namespace

GlooCommunicator::GlooCommunicator(int rank, int world_size,
                                   std::unique_ptr<RendezvousStore> store,
                                   std::unique_ptr<Impl> impl)
    : rank_(rank),
      world_size_(world_size),
      store_(std::move(store)),
      impl_(std::move(impl)) {}

GlooCommunicator::~GlooCommunicator() {
  impl_->collective_timeout.reset();
  const bool aborted = impl_->collectives->abort_reason().has_value();
  // A ring waiting on a peer that is gone is left to Gloo's own timeout.
  impl_->rings.Stop(/*abandon=*/aborted);
  if (aborted) {
    // ~ProcessGroupGloo waits for the queued work, which may wait on a peer
    // that is gone until Gloo's timeout; an aborted group is left to the
    // process's exit instead.
    (void)impl_->group.release();
  }
}

absl::Duration GlooOperationTimeout(absl::Duration timeout) {
  return timeout + std::max(absl::Seconds(1), timeout / 10);
}

void GlooCommunicator::Abort() {
  impl_->collectives->Abort("the communicator was aborted because the rank is failing");
}

const PendingCollectiveTracker* GlooCommunicator::collectives() const {
  return &impl_->collectives->tracker();
}

std::optional<std::string> GlooCommunicator::abort_reason() const {
  return impl_->collectives->abort_reason();
}

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    std::unique_ptr<RendezvousStore> store, int rank, int world_size,
    const GlooOptions& options) {
  if (store == nullptr) return absl::InvalidArgumentError("no store");
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not in [0, world size ", world_size, ")"));
  }
  try {
    auto group_options = c10d::ProcessGroupGloo::Options::create(
        ToChrono(GlooOperationTimeout(options.timeout)));
    group_options->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname(options.local_address));
    group_options->threads = options.threads;
    auto impl = std::make_unique<Impl>();
    impl->pairwise_exchange = options.pairwise_exchange && world_size == 2;
    impl->sharded_ring = options.sharded_ring && world_size >= 3;
    impl->group = c10::make_intrusive<c10d::ProcessGroupGloo>(store->impl_->store, rank,
                                                              world_size, group_options);
    impl->collectives = std::make_shared<GlooCollectives>(options.on_collective_failure);
    CollectiveTimeoutOptions timeout_options;
    timeout_options.timeout = options.timeout;
    timeout_options.poll_interval = options.timeout_poll_interval;
    // Gloo reports errors only to the waiting call: no poll, only the ages.
    impl->collective_timeout = std::make_unique<CollectiveTimeout>(
        impl->collectives->tracker(), impl->collectives->clock(), nullptr,
        [collectives = impl->collectives.get()](const std::string& reason) {
          collectives->Fail(reason);
        },
        timeout_options);
    impl->collective_timeout->Start();
    return std::unique_ptr<GlooCommunicator>(
        new GlooCommunicator(rank, world_size, std::move(store), std::move(impl)));
  } catch (const std::exception& e) {
    return C10dErrorToStatus(
        e, absl::StrCat("joining the Gloo group as rank ", rank, " of ", world_size,
                        " via ", options.local_address));
  }
}

namespace {

class PendingGlooWork final : public PendingCollective {
 public:
  PendingGlooWork(c10::intrusive_ptr<c10d::Work> work,
                  std::unique_ptr<TrackedCollective> tracked)
      : work_(std::move(work)), tracked_(std::move(tracked)) {}

  absl::Status Wait() override {
    try {
      work_->wait();
      return tracked_->Finish(absl::OkStatus());
    } catch (const std::exception& e) {
      return tracked_->Finish(C10dErrorToStatus(e, "Gloo all-reduce"));
    }
  }

 private:
  const c10::intrusive_ptr<c10d::Work> work_;  // holds the tensor until done
  const std::unique_ptr<TrackedCollective> tracked_;
};

// One all-reduce of two ranks: the send of the local tensor and the receive of
// the peer's are both under way; Wait adds the peer's into the local one.
class PendingExchange final : public PendingCollective {
 public:
  PendingExchange(at::Tensor tensor, at::Tensor received,
                  c10::intrusive_ptr<c10d::Work> send,
                  c10::intrusive_ptr<c10d::Work> recv, std::shared_ptr<ScratchPool> pool,
                  std::unique_ptr<TrackedCollective> tracked)
      : tensor_(std::move(tensor)),
        received_(std::move(received)),
        send_(std::move(send)),
        recv_(std::move(recv)),
        pool_(std::move(pool)),
        tracked_(std::move(tracked)) {}

  ~PendingExchange() override {
    // Not waited for: the transfers still use both tensors, so they are held
    // until done and the buffer is not reused.
    if (!done_) {
      try {
        recv_->wait();
        send_->wait();
      } catch (const std::exception&) {
        return;
      }
    }
  }

  absl::Status Wait() override {
    if (done_) return status_;
    done_ = true;
    try {
      // False: the transfer was aborted and the buffer holds nothing.
      if (recv_->wait() && send_->wait()) {
        tensor_.add_(received_);
        pool_->Release(std::move(received_));
      } else {
        status_ = absl::AbortedError("Gloo all-reduce (pairwise exchange) was aborted");
      }
    } catch (const std::exception& e) {
      status_ = C10dErrorToStatus(e, "Gloo all-reduce (pairwise exchange)");
    }
    status_ = tracked_->Finish(std::move(status_));
    return status_;
  }

 private:
  at::Tensor tensor_;
  at::Tensor received_;
  const c10::intrusive_ptr<c10d::Work> send_;
  const c10::intrusive_ptr<c10d::Work> recv_;
  const std::shared_ptr<ScratchPool> pool_;
  const std::unique_ptr<TrackedCollective> tracked_;
  bool done_ = false;
  absl::Status status_;
};

}  // namespace

std::unique_ptr<PendingCollective> GlooCommunicator::StartAllReduceSum(at::Tensor& tensor,
                                                                       int bucket) {
  absl::Status valid = CheckCollectiveTensor(tensor);
  if (valid.ok()) valid = impl_->collectives->CheckUsable();
  if (!valid.ok()) return FinishedCollective(std::move(valid));
  if (impl_->sharded_ring) return StartRing(tensor, bucket, RingKind::kAllReduce);
  auto tracked =
      std::make_unique<TrackedCollective>(impl_->collectives, "allreduce", bucket);
  if (impl_->pairwise_exchange) {
    try {
      const int peer = 1 - rank_;
      const int tag = static_cast<int>(impl_->next_tag++ & 0x7fffffffu);
      at::Tensor received = impl_->scratch->Acquire(tensor);
      std::vector<at::Tensor> outgoing{tensor};
      std::vector<at::Tensor> incoming{received};
      // Receive first: the peer's send can land as soon as it is posted.
      c10::intrusive_ptr<c10d::Work> recv = impl_->group->recv(incoming, peer, tag);
      c10::intrusive_ptr<c10d::Work> send = impl_->group->send(outgoing, peer, tag);
      *impl_->bytes_sent += static_cast<int64_t>(tensor.nbytes());
      return std::make_unique<PendingExchange>(tensor, std::move(received),
                                               std::move(send), std::move(recv),
                                               impl_->scratch, std::move(tracked));
    } catch (const std::exception& e) {
      return FinishedCollective(
          tracked->Finish(C10dErrorToStatus(e, "Gloo all-reduce (pairwise exchange)")));
    }
  }
  try {
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    // Gloo's ring: a reduce-scatter and an all-gather, (N-1)/N each.
    *impl_->bytes_sent +=
        2 * (world_size_ - 1) * static_cast<int64_t>(tensor.nbytes()) / world_size_;
    return std::make_unique<PendingGlooWork>(impl_->group->allreduce(tensors, options),
                                             std::move(tracked));
  } catch (const std::exception& e) {
    return FinishedCollective(tracked->Finish(C10dErrorToStatus(e, "Gloo all-reduce")));
  }
}

namespace {

// A ring collective on the executor's thread: Wait waits for it, then ends
// its tracking with its outcome.
class PendingRing final : public PendingCollective {
 public:
  PendingRing(std::shared_ptr<RingExecutor::Job> job,
              std::unique_ptr<TrackedCollective> tracked)
      : job_(std::move(job)), tracked_(std::move(tracked)) {}

  absl::Status Wait() override {
    if (!waited_) {
      waited_ = true;
      status_ = tracked_->Finish(job_->Await());
    }
    return status_;
  }

 private:
  const std::shared_ptr<RingExecutor::Job> job_;
  const std::unique_ptr<TrackedCollective> tracked_;
  bool waited_ = false;
  absl::Status status_;
};

// What one ring needs, held by its job until it ran: the tensor stays alive
// and the process group too.
struct Ring {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
  std::shared_ptr<GlooCollectives> collectives;
  std::shared_ptr<std::atomic<int64_t>> bytes_sent;
  at::Tensor buffer;
  int rank = 0;
  int world = 1;
  uint32_t first_tag = 0;  // step s uses first_tag + s

  int Mod(int i) const { return ((i % world) + world) % world; }
  at::Tensor Chunk(int owner) const {
    const ShardRange range = ShardOf(buffer.numel(), world, owner);
    return buffer.narrow(0, range.begin, range.size());
  }
  // A ring takes 2 x world tags: its reduce-scatter's steps, then its
  // all-gather's.
  int Tag(int step) const {
    return static_cast<int>((first_tag + static_cast<uint32_t>(step)) & 0x7fffffffu);
  }

  // One step: `outgoing` to the next rank, `incoming` from the previous one
  // (either may be empty: nothing moves), both finished on return.
  absl::Status Exchange(at::Tensor outgoing, at::Tensor incoming, int step) const {
    RETURN_IF_ERROR(collectives->CheckUsable());
    c10::intrusive_ptr<c10d::Work> recv;
    c10::intrusive_ptr<c10d::Work> send;
    if (incoming.numel() > 0) {
      std::vector<at::Tensor> tensors{incoming};
      recv = group->recv(tensors, Mod(rank - 1), Tag(step));
    }
    if (outgoing.numel() > 0) {
      std::vector<at::Tensor> tensors{outgoing};
      send = group->send(tensors, Mod(rank + 1), Tag(step));
      *bytes_sent += static_cast<int64_t>(outgoing.nbytes());
    }
    // False: the transfer was aborted and the buffer holds nothing.
    const bool received = recv == nullptr || recv->wait();
    const bool sent = send == nullptr || send->wait();
    if (!received || !sent) return absl::AbortedError("a ring transfer was aborted");
    return absl::OkStatus();
  }

  // Each rank sends chunk p straight to rank p and receives its own chunk
  // from every other rank, then sums it in rank order, ((c0 + c1) + c2) ...:
  // an element's sum is the same whichever chunk of whichever bucket it falls
  // in, so every bucket layout (stage 3's per-block buckets, stage 0's by
  // size) and every stage sums each gradient exactly alike. The traffic is a
  // ring's, (N-1)/N of the buffer per rank, all of it in one round.
  absl::Status ReduceScatter() const {
    RETURN_IF_ERROR(collectives->CheckUsable());
    const at::Tensor mine = Chunk(rank);
    // Not pooled: a pool would keep a part of every bucket size alive.
    at::Tensor received = at::empty({world - 1, mine.numel()}, buffer.options());
    auto slot = [&](int peer) { return received[peer < rank ? peer : peer - 1]; };
    std::vector<c10::intrusive_ptr<c10d::Work>> transfers;
    for (int peer = 0; peer < world; ++peer) {
      if (peer == rank || mine.numel() == 0) continue;
      std::vector<at::Tensor> tensors{slot(peer)};
      transfers.push_back(group->recv(tensors, peer, Tag(0)));
    }
    for (int peer = 0; peer < world; ++peer) {
      const at::Tensor outgoing = Chunk(peer);
      if (peer == rank || outgoing.numel() == 0) continue;
      std::vector<at::Tensor> tensors{outgoing};
      transfers.push_back(group->send(tensors, peer, Tag(0)));
      *bytes_sent += static_cast<int64_t>(outgoing.nbytes());
    }
    bool finished = true;
    for (const c10::intrusive_ptr<c10d::Work>& transfer : transfers) {
      finished = transfer->wait() && finished;  // every one waited for
    }
    if (!finished) return absl::AbortedError("a reduce-scatter transfer was aborted");
    if (mine.numel() == 0) return absl::OkStatus();
    // The sum builds up in rank 0's part (this rank's own chunk, or the one
    // received from rank 0), which is free to overwrite.
    at::Tensor total = rank == 0 ? mine : slot(0);
    for (int r = 1; r < world; ++r) total.add_(r == rank ? mine : slot(r));
    if (rank != 0) mine.copy_(total);
    return absl::OkStatus();
  }

  // Step s passes on chunk rank-s (its own first, then the one just
  // received), straight from and into the buffer.
  absl::Status AllGather() const {
    for (int step = 0; step + 1 < world; ++step) {
      RETURN_IF_ERROR(
          Exchange(Chunk(Mod(rank - step)), Chunk(Mod(rank - step - 1)), step));
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<PendingCollective> GlooCommunicator::StartRing(at::Tensor& buffer,
                                                               int bucket,
                                                               RingKind kind) {
  absl::Status valid = CheckCollectiveTensor(buffer);
  if (valid.ok() && kind != RingKind::kAllReduce && buffer.dim() != 1) {
    valid = absl::InvalidArgumentError(
        absl::StrCat("a reduce-scatter or all-gather takes a 1-D buffer, got ",
                     buffer.dim(), " dimensions"));
  }
  if (valid.ok()) valid = impl_->collectives->CheckUsable();
  if (!valid.ok()) return FinishedCollective(std::move(valid));
  const char* const name = kind == RingKind::kReduceScatter ? "reducescatter"
                           : kind == RingKind::kAllGather   ? "allgather"
                                                            : "allreduce";
  auto tracked = std::make_unique<TrackedCollective>(impl_->collectives, name, bucket);
  Ring ring{impl_->group, impl_->collectives, impl_->bytes_sent, buffer.view({-1}),
            rank_,        world_size_,        impl_->next_tag};
  impl_->next_tag += 2 * static_cast<uint32_t>(world_size_);
  std::shared_ptr<RingExecutor::Job> job =
      impl_->rings.Submit([ring = std::move(ring), kind, name]() -> absl::Status {
        try {
          if (kind != RingKind::kAllGather) RETURN_IF_ERROR(ring.ReduceScatter());
          if (kind != RingKind::kReduceScatter) RETURN_IF_ERROR(ring.AllGather());
          return absl::OkStatus();
        } catch (const std::exception& e) {
          return C10dErrorToStatus(e, absl::StrCat("Gloo ring ", name));
        }
      });
  return std::make_unique<PendingRing>(std::move(job), std::move(tracked));
}

std::unique_ptr<PendingCollective> GlooCommunicator::StartReduceScatterSum(
    at::Tensor& buffer, int bucket) {
  return StartRing(buffer, bucket, RingKind::kReduceScatter);
}

std::unique_ptr<PendingCollective> GlooCommunicator::StartAllGather(at::Tensor& buffer,
                                                                    int bucket) {
  return StartRing(buffer, bucket, RingKind::kAllGather);
}

int64_t GlooCommunicator::bytes_sent() const { return impl_->bytes_sent->load(); }

std::string GlooCommunicator::allreduce_algorithm() const {
  if (impl_->sharded_ring) return "reduce-scatter-all-gather";
  return impl_->pairwise_exchange ? "pairwise-exchange" : "ring";
}

absl::Status GlooCommunicator::Broadcast(at::Tensor& tensor, int root) {
  absl::Status valid = CheckCollectiveTensor(tensor);
  if (!valid.ok()) return valid;
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast root ", root, " is not in [0, ", world_size_, ")"));
  }
  valid = impl_->collectives->CheckUsable();
  if (!valid.ok()) return valid;
  TrackedCollective tracked(impl_->collectives, "broadcast", kNoBucket);
  try {
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    options.rootTensor = 0;
    impl_->group->broadcast(tensors, options)->wait();
    return tracked.Finish(absl::OkStatus());
  } catch (const std::exception& e) {
    return tracked.Finish(C10dErrorToStatus(e, "Gloo broadcast"));
  }
}

absl::Status GlooCommunicator::Barrier() {
  absl::Status usable = impl_->collectives->CheckUsable();
  if (!usable.ok()) return usable;
  TrackedCollective tracked(impl_->collectives, "barrier", kNoBucket);
  try {
    impl_->group->barrier()->wait();
    return tracked.Finish(absl::OkStatus());
  } catch (const std::exception& e) {
    return tracked.Finish(C10dErrorToStatus(e, "Gloo barrier"));
  }
}

}  // namespace tessera::trainer
