#include "worker/trainer/process_group.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/common/status_macros.h"
#include "worker/trainer/gloo_communicator.h"
#include "worker/trainer/net_util.h"

namespace tessera::trainer {
namespace {

absl::StatusOr<std::unique_ptr<Communicator>> JoinGloo(
    std::unique_ptr<GlooStore> store, const std::string& local_address, int rank,
    int world_size, const ProcessGroupOptions& options) {
  GlooOptions gloo;
  gloo.local_address = local_address;
  gloo.timeout = options.timeout;
  gloo.threads = options.gloo_threads;
  ASSIGN_OR_RETURN(std::unique_ptr<GlooCommunicator> communicator,
                   GlooCommunicator::Create(std::move(store), rank, world_size, gloo));
  return std::unique_ptr<Communicator>(std::move(communicator));
}

absl::StatusOr<ProcessGroup> JoinViaCoordinator(const LaunchOptions& launch,
                                                CoordinatorClient& coordinator,
                                                const ProcessGroupOptions& options) {
  ASSIGN_OR_RETURN(HostPort coordinator_address, ParseHostPort(launch.coordinator));
  ASSIGN_OR_RETURN(std::string local_address, LocalAddressFor(coordinator_address));

  std::unique_ptr<GlooStore> store;
  std::string bootstrap;
  if (launch.rank == 0 && launch.world_size > 1) {
    ASSIGN_OR_RETURN(store, GlooStore::Host(local_address, 0, options.timeout));
    bootstrap = store->address();
  }
  ASSIGN_OR_RETURN(RendezvousResult joined, coordinator.Rendezvous(bootstrap, "gloo"));
  if (joined.rank != launch.rank || joined.world_size != launch.world_size) {
    return absl::FailedPreconditionError(
        absl::StrCat("coordinator placed this process as rank ", joined.rank, " of ",
                     joined.world_size, " but it was launched as rank ", launch.rank,
                     " of ", launch.world_size));
  }
  if (!joined.backend.empty() && joined.backend != "gloo") {
    return absl::FailedPreconditionError(absl::StrCat(
        "coordinator chose backend \"", joined.backend, "\"; this trainer runs gloo"));
  }

  ProcessGroup group;
  group.rank = joined.rank;
  group.local_rank = joined.local_rank;
  group.world_size = joined.world_size;
  if (joined.world_size == 1) {
    group.communicator = std::make_unique<LocalCommunicator>();
    return group;
  }
  if (store == nullptr) {
    ASSIGN_OR_RETURN(HostPort store_address, ParseHostPort(joined.bootstrap));
    ASSIGN_OR_RETURN(store, GlooStore::Connect(store_address.host, store_address.port,
                                               options.timeout));
  }
  ASSIGN_OR_RETURN(group.communicator, JoinGloo(std::move(store), local_address,
                                                joined.rank, joined.world_size, options));
  return group;
}

absl::StatusOr<ProcessGroup> JoinViaStaticStore(const LaunchOptions& launch,
                                                const ProcessGroupOptions& options) {
  ASSIGN_OR_RETURN(HostPort store_address, ParseHostPort(launch.rendezvous_store));
  ASSIGN_OR_RETURN(std::string local_address, LocalAddressFor(store_address));
  std::unique_ptr<GlooStore> store;
  if (launch.rank == 0) {
    ASSIGN_OR_RETURN(
        store, GlooStore::Host(store_address.host, store_address.port, options.timeout));
  } else {
    ASSIGN_OR_RETURN(store, GlooStore::Connect(store_address.host, store_address.port,
                                               options.timeout));
  }
  ProcessGroup group;
  group.rank = launch.rank;
  group.local_rank = launch.local_rank;
  group.world_size = launch.world_size;
  ASSIGN_OR_RETURN(group.communicator, JoinGloo(std::move(store), local_address,
                                                launch.rank, launch.world_size, options));
  return group;
}

}  // namespace

absl::StatusOr<ProcessGroup> JoinProcessGroup(const LaunchOptions& launch,
                                              CoordinatorClient* coordinator,
                                              const ProcessGroupOptions& options) {
  if (launch.coordinator.empty() != (coordinator == nullptr)) {
    return absl::InvalidArgumentError(
        "a coordinator client is needed exactly when --coordinator is set");
  }
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
