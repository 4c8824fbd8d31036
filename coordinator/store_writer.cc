#include "coordinator/store_writer.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "spdlog/spdlog.h"

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

bool StoreWriter::Flush(absl::Duration timeout) {
  auto applied = std::make_shared<absl::Notification>();
  Enqueue(Barrier{}, [applied](absl::Status) { applied->Notify(); });
  return applied->WaitForNotificationWithTimeout(timeout);
}

int64_t StoreWriter::failed_writes() const {
  absl::MutexLock lock(&mu_);
  return failed_writes_;
}

bool StoreWriter::healthy() const {
  absl::MutexLock lock(&mu_);
  return healthy_;
}

namespace {

// Failures of the store itself (full disk, I/O), as opposed to a bad write.
bool StoreFailure(const absl::Status& s) {
  return absl::IsResourceExhausted(s) || absl::IsUnavailable(s) || absl::IsInternal(s) ||
         absl::IsDataLoss(s);
}

}  // namespace

void StoreWriter::Enqueue(Payload payload, Done done) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(Op{std::move(payload), std::move(done)});
}

void StoreWriter::Run() {
  absl::Duration backoff = absl::Milliseconds(100);
  int retries_while_stopping = 0;
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
    std::vector<Op> retry = Apply(batch);
    if (retry.empty()) {
      backoff = absl::Milliseconds(100);
      continue;
    }
    absl::MutexLock lock(&mu_);
    if (stop_ && ++retries_while_stopping > 20) {
      spdlog::error("store still failing at shutdown; {} state writes not stored",
                    retry.size());
      for (Op& op : retry) {
        if (op.done) op.done(absl::UnavailableError("store unavailable at shutdown"));
      }
      continue;
    }
    // Back in front of anything newer, so writes keep their order.
    for (auto it = retry.rbegin(); it != retry.rend(); ++it)
      queue_.push_front(std::move(*it));
    mu_.AwaitWithTimeout(absl::Condition(&stop_), backoff);
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

std::vector<StoreWriter::Op> StoreWriter::Apply(std::vector<Op>& batch) {
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
  bool store_failed = false;
  std::vector<Op> retry;
  for (size_t k = 0; k < batch.size(); ++k) {
    const absl::Status& s = results[k];
    if (!s.ok()) {
      ++failures;
      store_failed |= StoreFailure(s);
      spdlog::error("store write failed: {}", s.ToString());
    }
    const bool is_metrics =
        std::holds_alternative<std::vector<MetricRow>>(batch[k].payload);
    if (!s.ok() && StoreFailure(s) && !is_metrics &&
        !std::holds_alternative<Barrier>(batch[k].payload)) {
      retry.push_back(std::move(batch[k]));  // job state is never dropped
      continue;
    }
    if (batch[k].done) {
      batch[k].done(
          s.ok() || !StoreFailure(s)
              ? s
              : absl::UnavailableError(absl::StrCat("store unavailable: ", s.message())));
    }
  }
  absl::MutexLock lock(&mu_);
  failed_writes_ += failures;
  healthy_ = !store_failed;
  return retry;
}

}  // namespace tessera
