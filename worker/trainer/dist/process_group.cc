#include "worker/trainer/dist/process_group.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/trainer/dist/net_util.h"
#include "worker/trainer/dist/rendezvous_store.h"

#if TESSERA_HAVE_GLOO
#include "worker/trainer/dist/gloo_communicator.h"
#endif

#if TESSERA_NCCL_TENSORS
#include "worker/trainer/dist/nccl_communicator.h"
#include "worker/trainer/dist/nccl_tensor_communicator.h"
#endif

namespace tessera::trainer {
namespace {

// The static store key under which rank 0 publishes the NCCL unique id.
constexpr char kNcclIdKey[] = "tessera/nccl_unique_id";

absl::Status CheckBackend(const ProcessGroupOptions& options, int world_size) {
  if (options.backend == "gloo") {
    // A world of one needs no collective, so no Gloo.
    if (world_size == 1 || GlooBackendAvailable()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        "the gloo backend (CPU ranks at world size > 1) needs a tessera-train built "
        "against a LibTorch with Gloo's headers (Debian's libtorch-dev with libgloo-dev; "
        "pip's wheels ship none): this one was built without; use the nccl backend on "
        "GPUs, or rebuild with -DTESSERA_GLOO_INCLUDE=DIR naming a folder that holds "
        "gloo/algorithm.h");
  }
  if (options.backend != "nccl") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown collective backend \"", options.backend, "\""));
  }
  if (!NcclBackendAvailable()) {
    return absl::FailedPreconditionError(
        "the nccl backend needs a tessera-train built with a CUDA LibTorch and NCCL");
  }
  return absl::OkStatus();
}

// Rank 0's NCCL bootstrap: a fresh unique id.
absl::StatusOr<std::string> NewNcclBootstrap() {
#if TESSERA_NCCL_TENSORS
  return NewNcclUniqueId();
#else
  return absl::FailedPreconditionError("built without NCCL");
#endif
}

absl::StatusOr<std::unique_ptr<Communicator>> JoinNccl(
    const std::string& unique_id, int rank, int world_size,
    const ProcessGroupOptions& options) {
#if TESSERA_NCCL_TENSORS
  NcclOptions nccl;
  nccl.timeout = options.timeout;
  nccl.on_collective_failure = options.on_collective_failure;
  nccl.on_device_failure = options.on_device_failure;
  ASSIGN_OR_RETURN(
      std::unique_ptr<NcclComm> comm,
      NcclComm::Create(unique_id, rank, world_size, options.cuda_device, nccl));
  return std::unique_ptr<Communicator>(
      std::make_unique<NcclCommunicator>(std::move(comm)));
#else
  (void)unique_id;
  (void)rank;
  (void)world_size;
  (void)options;
  return absl::FailedPreconditionError("built without NCCL");
#endif
}

absl::StatusOr<std::unique_ptr<Communicator>> JoinGloo(
    std::unique_ptr<RendezvousStore> store, const std::string& local_address, int rank,
    int world_size, const ProcessGroupOptions& options) {
#if TESSERA_HAVE_GLOO
  GlooOptions gloo;
  gloo.local_address = local_address;
  gloo.timeout = options.timeout;
  gloo.on_collective_failure = options.on_collective_failure;
  gloo.threads = options.gloo_threads;
  gloo.pairwise_exchange = options.gloo_pairwise_exchange;
  ASSIGN_OR_RETURN(std::unique_ptr<GlooCommunicator> communicator,
                   GlooCommunicator::Create(std::move(store), rank, world_size, gloo));
  return std::unique_ptr<Communicator>(std::move(communicator));
#else
  (void)store;
  (void)local_address;
  (void)rank;
  (void)world_size;
  (void)options;
  return absl::FailedPreconditionError("built without Gloo");
#endif
}

absl::StatusOr<ProcessGroup> JoinViaCoordinator(const LaunchOptions& launch,
                                                RendezvousClient& coordinator,
                                                const ProcessGroupOptions& options) {
  ASSIGN_OR_RETURN(HostPort coordinator_address, ParseHostPort(launch.coordinator));
  ASSIGN_OR_RETURN(std::string local_address, LocalAddressFor(coordinator_address));
  const bool nccl = options.backend == "nccl";

  std::unique_ptr<RendezvousStore> store;
  std::string bootstrap;
  if (launch.rank == 0 && launch.world_size > 1) {
    if (nccl) {
      ASSIGN_OR_RETURN(bootstrap, NewNcclBootstrap());
    } else {
      ASSIGN_OR_RETURN(store, RendezvousStore::Host(local_address, 0, options.timeout));
      bootstrap = store->address();
    }
  }
  ASSIGN_OR_RETURN(RendezvousResult joined,
                   coordinator.Rendezvous(bootstrap, options.backend));
  if (joined.rank != launch.rank || joined.world_size != launch.world_size) {
    return absl::FailedPreconditionError(
        absl::StrCat("coordinator placed this process as rank ", joined.rank, " of ",
                     joined.world_size, " but it was launched as rank ", launch.rank,
                     " of ", launch.world_size));
  }
  if (!joined.backend.empty() && joined.backend != options.backend) {
    return absl::FailedPreconditionError(
        absl::StrCat("coordinator chose backend \"", joined.backend,
                     "\"; this rank runs ", options.backend));
  }

  ProcessGroup group;
  group.rank = joined.rank;
  group.local_rank = joined.local_rank;
  group.world_size = joined.world_size;
  if (joined.world_size == 1) {
    group.communicator = std::make_unique<LocalCommunicator>();
    return group;
  }
  if (nccl) {
    ASSIGN_OR_RETURN(group.communicator,
                     JoinNccl(joined.bootstrap, joined.rank, joined.world_size, options));
    return group;
  }
  if (store == nullptr) {
    ASSIGN_OR_RETURN(HostPort store_address, ParseHostPort(joined.bootstrap));
    ASSIGN_OR_RETURN(store, RendezvousStore::Connect(
                                store_address.host, store_address.port, options.timeout));
  }
  ASSIGN_OR_RETURN(group.communicator, JoinGloo(std::move(store), local_address,
                                                joined.rank, joined.world_size, options));
  return group;
}

absl::StatusOr<ProcessGroup> JoinViaStaticStore(const LaunchOptions& launch,
                                                const ProcessGroupOptions& options) {
  ASSIGN_OR_RETURN(HostPort store_address, ParseHostPort(launch.rendezvous_store));
  ASSIGN_OR_RETURN(std::string local_address, LocalAddressFor(store_address));
  std::unique_ptr<RendezvousStore> store;
  if (launch.rank == 0) {
    ASSIGN_OR_RETURN(store, RendezvousStore::Host(store_address.host, store_address.port,
                                                  options.timeout));
  } else {
    ASSIGN_OR_RETURN(store, RendezvousStore::Connect(
                                store_address.host, store_address.port, options.timeout));
  }
  ProcessGroup group;
  group.rank = launch.rank;
  group.local_rank = launch.local_rank;
  group.world_size = launch.world_size;
  if (options.backend == "nccl") {
    // The store lives until every rank has joined NCCL, which needs the id.
    if (launch.rank == 0) {
      ASSIGN_OR_RETURN(const std::string id, NewNcclBootstrap());
      RETURN_IF_ERROR(store->Set(kNcclIdKey, id));
    }
    ASSIGN_OR_RETURN(const std::string id, store->Get(kNcclIdKey));
    ASSIGN_OR_RETURN(group.communicator,
                     JoinNccl(id, launch.rank, launch.world_size, options));
    return group;
  }
  ASSIGN_OR_RETURN(group.communicator, JoinGloo(std::move(store), local_address,
                                                launch.rank, launch.world_size, options));
  return group;
}

}  // namespace

bool GlooBackendAvailable() {
#if TESSERA_HAVE_GLOO
  return true;
#else
  return false;
#endif
}

bool NcclBackendAvailable() {
#if TESSERA_NCCL_TENSORS
  return true;
#else
  return false;
#endif
}

absl::StatusOr<ProcessGroup> JoinProcessGroup(const LaunchOptions& launch,
                                              RendezvousClient* coordinator,
                                              const ProcessGroupOptions& options) {
  if (launch.coordinator.empty() != (coordinator == nullptr)) {
    return absl::InvalidArgumentError(
        "a coordinator client is needed exactly when --coordinator is set");
  }
  RETURN_IF_ERROR(CheckBackend(options, launch.world_size));
  if (coordinator != nullptr) return JoinViaCoordinator(launch, *coordinator, options);
  if (!launch.rendezvous_store.empty()) return JoinViaStaticStore(launch, options);
  if (launch.world_size != 1) {
    return absl::InvalidArgumentError(
        "--world-size > 1 needs --coordinator or --rendezvous-store");
  }
  ProcessGroup group;
  group.local_rank = launch.local_rank;
  group.communicator = std::make_unique<LocalCommunicator>();
  return group;
}

}  // namespace tessera::trainer
