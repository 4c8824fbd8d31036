#include "worker/trainer/run/training_feeds.h"

#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tessera::trainer {
namespace {

// Micro-batch p of this run is the micro-batch p after `start` in the plan:
// this rank's share of that global block of its epoch's order. Each epoch's
// order is computed once and shared by the prefetcher's threads.
BatchPrefetcher::Producer PlannedBatches(const SampleLoader& loader,
                                         const DistributedSampler& sampler,
                                         const EpochPlan& plan, DataPosition start,
                                         int rank) {
  struct Orders {
    absl::Mutex mu;
    std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> by_epoch
        ABSL_GUARDED_BY(mu);
  };
  auto orders = std::make_shared<Orders>();
  return [&loader, &sampler, plan, start, rank, orders](int64_t p) {
    const DataPosition at = plan.Advance(start, p);
    std::shared_ptr<const std::vector<int64_t>> order;
    {
      absl::MutexLock lock(&orders->mu);
      auto& slot = orders->by_epoch[at.epoch];
      if (slot == nullptr) {
        slot = std::make_shared<const std::vector<int64_t>>(sampler.EpochOrder(at.epoch));
      }
      order = slot;
      // Epochs behind the one asked for are done with.
      orders->by_epoch.erase(orders->by_epoch.begin(), orders->by_epoch.find(at.epoch));
    }
    const std::vector<int64_t> ids = plan.RankBatch(*order, at, rank);
    return loader.Load(ids, 0, static_cast<int64_t>(ids.size()), at.epoch);
  };
}

}  // namespace

std::unique_ptr<TrainingFeeds> TrainingFeeds::Create(const TrainingData& data,
                                                     const TrainerOptions& options,
                                                     const FeedPlan& plan) {
  std::unique_ptr<TrainingFeeds> feeds(new TrainingFeeds());
  const ChannelStats stats = data.stats();
  const BatchStage stage = plan.finish_on_device.value_or(plan.placement.cuda)
                               ? BatchStage::kDevice
                               : BatchStage::kHost;
  BatchLoaderOptions test_loading;
  test_loading.image_size = plan.image_size;
  test_loading.interpolation = EffectiveInterpolation(options);
  test_loading.stage = stage;
  test_loading.pin_memory = plan.placement.cuda && stage == BatchStage::kDevice;
  BatchLoaderOptions train_loading = test_loading;
  train_loading.augment = options.augment.value_or(data.augments_by_default());
  train_loading.seed = static_cast<uint64_t>(options.seed);
  feeds->train_loader_ = data.MakeLoader(Split::kTrain, train_loading);
  feeds->test_loader_ = data.MakeLoader(Split::kTest, test_loading);
  if (data.shape().val_size > 0) {
    feeds->val_loader_ = data.MakeLoader(Split::kVal, test_loading);
  }
  BatchPrefetcherOptions prefetching;
  prefetching.workers = options.data_workers;
  prefetching.on_worker_start = [placement = plan.placement] {
    MakePlacementCurrent(placement).IgnoreError();
  };
  feeds->train_batches_ = std::make_unique<BatchPrefetcher>(
      PlannedBatches(*feeds->train_loader_, *plan.sampler, *plan.epochs, plan.start,
                     plan.rank),
      0, plan.micro_batches, prefetching);
  BatchFeedOptions feeding;
  feeding.device = TorchDevice(plan.placement);
  feeding.stage = stage;
  feeding.stats = stats;
  feeding.image_size = plan.image_size;
  feeding.interpolation = test_loading.interpolation;
  feeds->train_feed_ = std::make_unique<BatchFeed>(feeds->train_batches_.get(), feeding);
  feeds->test_feed_ = std::make_unique<BatchFeed>(nullptr, feeding);
  return feeds;
}

TrainingFeeds::~TrainingFeeds() = default;

}  // namespace tessera::trainer
