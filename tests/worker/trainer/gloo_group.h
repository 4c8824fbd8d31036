// RunGlooGroup: a Gloo group of `world` ranks on loopback inside one test
// process, one thread per rank (rank 0 hosts the c10d store on a free port),
// running `body(rank, communicator)` on each. For trainer tests only.
#ifndef TESSERA_TESTS_WORKER_TRAINER_GLOO_GROUP_H_
#define TESSERA_TESTS_WORKER_TRAINER_GLOO_GROUP_H_

#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/dist/gloo_communicator.h"

namespace tessera::trainer::testing {

// Every rank's communicator is made with `options` (its local_address is
// 127.0.0.1; the store's timeout is options.timeout).
inline void RunGlooGroup(int world, const GlooOptions& options,
                         const std::function<void(int, Communicator&)>& body) {
  const absl::Duration timeout = options.timeout;
  absl::StatusOr<std::unique_ptr<RendezvousStore>> hosted =
      RendezvousStore::Host("127.0.0.1", 0, timeout);
  ASSERT_TRUE(hosted.ok()) << hosted.status();
  const int port = (*hosted)->port();
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world; ++rank) {
    std::unique_ptr<RendezvousStore> own = rank == 0 ? *std::move(hosted) : nullptr;
    ranks.emplace_back(
        [&body, &options, port, rank, world, timeout, store = std::move(own)]() mutable {
          if (store == nullptr) {
            absl::StatusOr<std::unique_ptr<RendezvousStore>> joined =
                RendezvousStore::Connect("127.0.0.1", port, timeout);
            ASSERT_TRUE(joined.ok()) << joined.status();
            store = *std::move(joined);
          }
          GlooOptions own_options = options;
          own_options.local_address = "127.0.0.1";
          auto communicator =
              GlooCommunicator::Create(std::move(store), rank, world, own_options);
          ASSERT_TRUE(communicator.ok()) << communicator.status();
          body(rank, **communicator);
        });
  }
  for (std::thread& thread : ranks) thread.join();
}

inline void RunGlooGroup(int world, const std::function<void(int, Communicator&)>& body,
                         absl::Duration timeout = absl::Seconds(30),
                         bool pairwise_exchange = true) {
  GlooOptions options;
  options.timeout = timeout;
  options.pairwise_exchange = pairwise_exchange;
  RunGlooGroup(world, options, body);
}

}  // namespace tessera::trainer::testing

#endif  // TESSERA_TESTS_WORKER_TRAINER_GLOO_GROUP_H_
