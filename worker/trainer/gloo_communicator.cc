#include "worker/trainer/gloo_communicator.h"

#include <chrono>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "worker/trainer/net_util.h"

namespace tessera::trainer {

struct GlooStore::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
  std::string host;
};

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

struct GlooCommunicator::Impl {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
  bool pairwise_exchange = false;
  // Send/receive tag of the next exchange. Every rank issues collectives in the
  // same order, so the counters agree.
  uint32_t next_tag = 0;
  std::shared_ptr<ScratchPool> scratch = std::make_shared<ScratchPool>();
};

namespace {

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// c10d and Gloo signal every failure with an exception whose text is the only
// classification available.
absl::Status FromException(const std::exception& e, const std::string& what) {
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

GlooStore::GlooStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GlooStore::~GlooStore() = default;

absl::StatusOr<std::unique_ptr<GlooStore>> GlooStore::Host(
    const std::string& advertise_host, int port, absl::Duration timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = true;
  // Other ranks learn the address only after the coordinator answers, so the
  // server must not wait for them here.
  options.numWorkers = c10::nullopt;
  options.waitWorkers = false;
  options.timeout = ToChrono(timeout);
  try {
    auto impl = std::make_unique<Impl>();
    impl->store = c10::make_intrusive<c10d::TCPStore>(advertise_host, options);
    impl->host = advertise_host;
    if (impl->store->getPort() == 0) {
      return absl::InternalError("TCPStore did not report the port it bound");
    }
    return std::unique_ptr<GlooStore>(new GlooStore(std::move(impl)));
  } catch (const std::exception& e) {
    return FromException(e, absl::StrCat("hosting a TCPStore on port ", port));
  }
}

absl::StatusOr<std::unique_ptr<GlooStore>> GlooStore::Connect(const std::string& host,
                                                              int port,
                                                              absl::Duration timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = false;
  options.timeout = ToChrono(timeout);
  try {
    auto impl = std::make_unique<Impl>();
    impl->store = c10::make_intrusive<c10d::TCPStore>(host, options);
    impl->host = host;
    return std::unique_ptr<GlooStore>(new GlooStore(std::move(impl)));
  } catch (const std::exception& e) {
    return FromException(
        e, absl::StrCat("connecting to the TCPStore at ", FormatHostPort(host, port)));
  }
}

int GlooStore::port() const { return impl_->store->getPort(); }

absl::Status GlooStore::Set(const std::string& key, const std::string& value) {
  try {
    impl_->store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return FromException(e, absl::StrCat("setting store key ", key));
  }
}

absl::StatusOr<std::string> GlooStore::Get(const std::string& key) {
  try {
    const std::vector<uint8_t> value = impl_->store->get(key);
    return std::string(value.begin(), value.end());
  } catch (const std::exception& e) {
    return FromException(e, absl::StrCat("getting store key ", key));
  }
}

std::string GlooStore::address() const { return FormatHostPort(impl_->host, port()); }

GlooCommunicator::GlooCommunicator(int rank, int world_size,
                                   std::unique_ptr<GlooStore> store,
                                   std::unique_ptr<Impl> impl)
    : rank_(rank),
      world_size_(world_size),
      store_(std::move(store)),
      impl_(std::move(impl)) {}

GlooCommunicator::~GlooCommunicator() = default;

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    std::unique_ptr<GlooStore> store, int rank, int world_size,
    const GlooOptions& options) {
  if (store == nullptr) return absl::InvalidArgumentError("no store");
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not in [0, world size ", world_size, ")"));
  }
  try {
    auto group_options =
        c10d::ProcessGroupGloo::Options::create(ToChrono(options.timeout));
    group_options->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname(options.local_address));
    group_options->threads = options.threads;
    auto impl = std::make_unique<Impl>();
    impl->pairwise_exchange = options.pairwise_exchange && world_size == 2;
    impl->group = c10::make_intrusive<c10d::ProcessGroupGloo>(store->impl_->store, rank,
                                                              world_size, group_options);
    return std::unique_ptr<GlooCommunicator>(
        new GlooCommunicator(rank, world_size, std::move(store), std::move(impl)));
  } catch (const std::exception& e) {
    return FromException(e, absl::StrCat("joining the Gloo group as rank ", rank, " of ",
                                         world_size, " via ", options.local_address));
  }
}

namespace {

class PendingGlooWork final : public PendingCollective {
 public:
  explicit PendingGlooWork(c10::intrusive_ptr<c10d::Work> work)
      : work_(std::move(work)) {}

  absl::Status Wait() override {
    try {
      work_->wait();
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return FromException(e, "Gloo all-reduce");
    }
  }

 private:
  const c10::intrusive_ptr<c10d::Work> work_;  // holds the tensor until done
};

// One all-reduce of two ranks: the send of the local tensor and the receive of
// the peer's are both under way; Wait adds the peer's into the local one.
class PendingExchange final : public PendingCollective {
 public:
  PendingExchange(at::Tensor tensor, at::Tensor received,
                  c10::intrusive_ptr<c10d::Work> send,
                  c10::intrusive_ptr<c10d::Work> recv, std::shared_ptr<ScratchPool> pool)
      : tensor_(std::move(tensor)),
        received_(std::move(received)),
        send_(std::move(send)),
        recv_(std::move(recv)),
        pool_(std::move(pool)) {}

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
      recv_->wait();
      send_->wait();
      tensor_.add_(received_);
      pool_->Release(std::move(received_));
    } catch (const std::exception& e) {
      status_ = FromException(e, "Gloo all-reduce (pairwise exchange)");
    }
    return status_;
  }

 private:
  at::Tensor tensor_;
  at::Tensor received_;
  const c10::intrusive_ptr<c10d::Work> send_;
  const c10::intrusive_ptr<c10d::Work> recv_;
  const std::shared_ptr<ScratchPool> pool_;
  bool done_ = false;
  absl::Status status_;
};

}  // namespace

std::unique_ptr<PendingCollective> GlooCommunicator::AllReduceSumAsync(
    at::Tensor& tensor) {
  absl::Status valid = CheckCollectiveTensor(tensor);
  if (!valid.ok()) return FinishedCollective(std::move(valid));
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
      return std::make_unique<PendingExchange>(
          tensor, std::move(received), std::move(send), std::move(recv), impl_->scratch);
    } catch (const std::exception& e) {
      return FinishedCollective(FromException(e, "Gloo all-reduce (pairwise exchange)"));
    }
  }
  try {
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    return std::make_unique<PendingGlooWork>(impl_->group->allreduce(tensors, options));
  } catch (const std::exception& e) {
    return FinishedCollective(FromException(e, "Gloo all-reduce"));
  }
}

std::string GlooCommunicator::allreduce_algorithm() const {
  return impl_->pairwise_exchange ? "pairwise-exchange" : "ring";
}

absl::Status GlooCommunicator::Broadcast(at::Tensor& tensor, int root) {
  absl::Status valid = CheckCollectiveTensor(tensor);
  if (!valid.ok()) return valid;
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast root ", root, " is not in [0, ", world_size_, ")"));
  }
  try {
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    options.rootTensor = 0;
    impl_->group->broadcast(tensors, options)->wait();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return FromException(e, "Gloo broadcast");
  }
}

absl::Status GlooCommunicator::Barrier() {
  try {
    impl_->group->barrier()->wait();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return FromException(e, "Gloo barrier");
  }
}

}  // namespace tessera::trainer
