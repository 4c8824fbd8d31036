#include "coordinator/store_writer.h"

#include "spdlog/spdlog.h"
#include <utility>

#include "absl/synchronization/notification.h"

namespace tessera {

StoreWriter::StoreWriter(Store* store) : store_(store), thread_([this] { Run(); }) {}

StoreWriter::~StoreWriter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void StoreWriter::UpdateJob(JobRecord job, Done done) {
  Enqueue(std::move(job), std::move(done));
}
void StoreWriter::PutRanks(std::vector<RankRecord> ranks, Done done) {
  Enqueue(std::move(ranks), std::move(done));
}
void StoreWriter::UpsertWorker(WorkerRecord worker, Done done) {
  Enqueue(std::move(worker), std::move(done));
}
void StoreWriter::AppendMetrics(std::vector<MetricRow> rows, Done done) {
  Enqueue(std::move(rows), std::move(done));
}

void StoreWriter::Flush() {
  absl::Notification applied;
  Enqueue(Barrier{}, [&applied](absl::Status) { applied.Notify(); });
  applied.WaitForNotification();
}

int64_t StoreWriter::failed_writes() const {
  absl::MutexLock lock(&mu_);
  return failed_writes_;
}

void StoreWriter::Enqueue(Payload payload, Done done) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(Op{std::move(payload), std::move(done)});
}

void StoreWriter::Run() {
  for (;;) {
    std::vector<Op> batch;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](StoreWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
            return w->stop_ || !w->queue_.empty();
          },
          this));
      if (queue_.empty() && stop_) return;
      while (!queue_.empty()) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    Apply(batch);
  }
}

void StoreWriter::Apply(std::vector<Op>& batch) {
  std::vector<absl::Status> results(batch.size());
  size_t i = 0;
  while (i < batch.size()) {
    Payload& p = batch[i].payload;
    if (auto* rows = std::get_if<std::vector<MetricRow>>(&p)) {
      // Merge this and the following metric batches into one transaction.
      size_t j = i + 1;
      std::vector<MetricRow> merged = std::move(*rows);
      while (j < batch.size() &&
             std::holds_alternative<std::vector<MetricRow>>(batch[j].payload)) {
        auto& more = std::get<std::vector<MetricRow>>(batch[j].payload);
        merged.insert(merged.end(), std::make_move_iterator(more.begin()),
                      std::make_move_iterator(more.end()));
        ++j;
      }
      absl::Status s = store_->AppendMetrics(merged);
      for (size_t k = i; k < j; ++k) results[k] = s;
      i = j;
      continue;
    }
    if (auto* job = std::get_if<JobRecord>(&p)) {
      results[i] = store_->UpdateJob(*job);
    } else if (auto* ranks = std::get_if<std::vector<RankRecord>>(&p)) {
      results[i] = store_->PutRanks(*ranks);
    } else if (auto* worker = std::get_if<WorkerRecord>(&p)) {
      results[i] = store_->UpsertWorker(*worker);
    }
    ++i;
  }
  int64_t failures = 0;
  for (size_t k = 0; k < batch.size(); ++k) {
    if (!results[k].ok()) {
      ++failures;
      spdlog::error("store write failed: {}", results[k].ToString());
    }
    if (batch[k].done) batch[k].done(results[k]);
  }
  if (failures > 0) {
    absl::MutexLock lock(&mu_);
    failed_writes_ += failures;
  }
}

}  // namespace tessera
