#include "coordinator/store/store_writer.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "common/retry.h"
#include "spdlog/spdlog.h"

namespace tessera {

namespace {
// Within this many reserves of a full disk, the journal is given back after
// every round (NearReserve). The journal itself is kept under one such share
// of the reserve at every commit (LimitJournal).
constexpr int64_t kJournalHeadroom = 4;
}  // namespace

StoreWriter::StoreWriter(Store* store, Options options)
    : store_(store), options_(options), thread_([this] { Run(); }) {
  if (options_.reserve_bytes <= 0) return;
  // Without a bound, SQLite's WAL grows to 1,000 pages (4 MiB) before it
  // checkpoints: on a small disk that is more than the room left above the
  // reserve, and between two checks of the free space (250 ms apart, longer
  // under load) it grew into the reserve after the disk had room again, so
  // that metrics were shed with the disk mostly free.
  if (absl::Status limited =
          store_->LimitJournal(options_.reserve_bytes / kJournalHeadroom);
      !limited.ok()) {
    spdlog::warn("store journal not limited to a share of the reserve: {}",
                 limited.ToString());
  }
}

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
  {
    absl::MutexLock lock(&mu_);
    if (queue_.size() + in_flight_ < options_.max_backlog) {
      queue_.push_back(Op{std::move(rows), std::move(done)});
      return;
    }
    NoteBacklogLocked();
  }
  // Never acknowledged, so the sender keeps the points and retries.
  if (done) {
    done(absl::UnavailableError(
        "store writer backlog full (the store is failing or slow); retry later"));
  }
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

size_t StoreWriter::backlog() const {
  absl::MutexLock lock(&mu_);
  return queue_.size() + in_flight_;
}

int64_t StoreWriter::coalesced_writes() const {
  absl::MutexLock lock(&mu_);
  return coalesced_;
}

bool StoreWriter::BelowReserve() {
  if (options_.reserve_bytes <= 0) return false;
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    if (now - space_checked_ < absl::Milliseconds(250)) return below_reserve_;
  }
  // statvfs outside the lock; a racing checker's answer is as good.
  absl::StatusOr<DiskSpace> space = store_->GetDiskSpace();
  const bool below =
      space.ok() && space->free_bytes >= 0 && space->free_bytes < options_.reserve_bytes;
  absl::MutexLock lock(&mu_);
  // A racing checker that looked later has the fresher answer.
  if (now < space_checked_) return below_reserve_;
  space_checked_ = now;
  near_reserve_ = space.ok() && space->free_bytes >= 0 &&
                  space->free_bytes < kJournalHeadroom * options_.reserve_bytes;
  if (below && !below_reserve_) {
    spdlog::warn(
        "the database's disk has {} bytes free, below its reserve of {} (--db-reserve): "
        "metric rows and log lines are shed (counted per job); job state is still stored",
        space->free_bytes, options_.reserve_bytes);
  } else if (!below && below_reserve_) {
    spdlog::info(
        "the database's disk is above its reserve again: metrics and logs are "
        "stored again");
  }
  below_reserve_ = below;
  if (!below) shedding_ = false;
  return below;
}

bool StoreWriter::NearReserve() {
  BelowReserve();  // refreshes the check at most every 250 ms
  absl::MutexLock lock(&mu_);
  return near_reserve_;
}

bool StoreWriter::shedding() const {
  absl::MutexLock lock(&mu_);
  return shedding_;
}

void StoreWriter::CountShedLog(int64_t job_id, int64_t lines) {
  absl::MutexLock lock(&mu_);
  shedding_ = true;
  shed_[job_id].log_lines += lines;
}

void StoreWriter::CountShedRows(const std::vector<MetricRow>& rows) {
  absl::MutexLock lock(&mu_);
  shedding_ = true;
  for (const MetricRow& row : rows) ++shed_[row.job_id].metric_rows;
}

StoreWriter::Shed StoreWriter::TakeShed(int64_t job_id) {
  absl::MutexLock lock(&mu_);
  auto it = shed_.find(job_id);
  if (it == shed_.end()) return Shed{};
  Shed out = it->second;
  shed_.erase(it);
  return out;
}

std::set<int64_t> StoreWriter::UnstoredJobs() const {
  absl::MutexLock lock(&mu_);
  std::set<int64_t> jobs = kept_jobs_;
  for (const Op& op : queue_) AddJobIds(op, jobs);
  return jobs;
}

void StoreWriter::AddJobIds(const Op& op, std::set<int64_t>& ids) {
  if (auto* job = std::get_if<JobRecord>(&op.payload)) {
    ids.insert(job->id);
  } else if (auto* ranks = std::get_if<std::vector<RankRecord>>(&op.payload)) {
    for (const RankRecord& r : *ranks) ids.insert(r.job_id);
  }
}

absl::Status StoreWriter::StoreOrShedMetrics(const std::vector<MetricRow>& rows) {
  if (BelowReserve()) {
    CountShedRows(rows);
    return absl::OkStatus();
  }
  absl::Status s = store_->AppendMetrics(rows);
  if (absl::IsResourceExhausted(s) && options_.reserve_bytes > 0) {
    // The disk filled between two checks: shed rather than hold the sender.
    CountShedRows(rows);
    return absl::OkStatus();
  }
  return s;
}

namespace {

// Failures of the store itself (full disk, I/O), as opposed to a bad write.
bool StoreFailure(const absl::Status& s) {
  return absl::IsResourceExhausted(s) || absl::IsUnavailable(s) || absl::IsInternal(s) ||
         absl::IsDataLoss(s);
}

// Runs both callbacks with the same status.
StoreWriter::Done Chain(StoreWriter::Done first, StoreWriter::Done second) {
  if (!first) return second;
  if (!second) return first;
  return [first = std::move(first), second = std::move(second)](absl::Status s) {
    first(s);
    second(std::move(s));
  };
}

}  // namespace

void StoreWriter::Enqueue(Payload payload, Done done) {
  absl::MutexLock lock(&mu_);
  const bool worker = std::holds_alternative<WorkerRecord>(payload);
  queue_.push_back(Op{std::move(payload), std::move(done)});
  if (worker && queue_.size() > 1) CoalesceLocked();
  NoteBacklogLocked();
}

void StoreWriter::CoalesceLocked() {
  std::map<std::string, size_t> oldest;  // worker name -> its first queued upsert
  std::vector<bool> superseded(queue_.size(), false);
  bool any = false;
  for (size_t i = 0; i < queue_.size(); ++i) {
    auto* worker = std::get_if<WorkerRecord>(&queue_[i].payload);
    if (worker == nullptr) continue;
    auto [it, first] = oldest.emplace(worker->name, i);
    if (first) continue;
    Op& keep = queue_[it->second];
    std::get<WorkerRecord>(keep.payload) = std::move(*worker);
    keep.done = Chain(std::move(keep.done), std::move(queue_[i].done));
    superseded[i] = true;
    any = true;
    ++coalesced_;
  }
  if (!any) return;
  std::deque<Op> kept;
  for (size_t i = 0; i < queue_.size(); ++i) {
    if (!superseded[i]) kept.push_back(std::move(queue_[i]));
  }
  queue_ = std::move(kept);
}

void StoreWriter::NoteBacklogLocked() {
  const size_t backlog = queue_.size() + in_flight_;
  if (!over_backlog_ && backlog >= options_.max_backlog) {
    over_backlog_ = true;
    spdlog::error(
        "store writer backlog reached {} writes (cap {}): metric reports are refused "
        "(their trainers retry) until it drains; state writes are kept, never dropped",
        backlog, options_.max_backlog);
  } else if (over_backlog_ && backlog < options_.max_backlog / 2) {
    over_backlog_ = false;
    spdlog::info("store writer backlog down to {} writes: metric reports accepted again",
                 backlog);
  }
}

void StoreWriter::Run() {
  // At most a second between tries: writes resume within a second of the disk
  // having room again. The only writer, so no jitter; it never gives up.
  RealClock clock;
  Backoff backoff({.initial_delay = absl::Milliseconds(100),
                   .max_delay = absl::Seconds(1),
                   .jitter = 0},
                  clock);
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
      in_flight_ = batch.size();
    }
    std::vector<Op> retry = Apply(batch);
    // On a disk below its reserve (or full), the journal gives its space back
    // after every round, so that state writes keep fitting.
    if (NearReserve() || !retry.empty()) {
      if (absl::Status compacted = store_->CompactJournal(); !compacted.ok()) {
        spdlog::debug("store journal not compacted: {}", compacted.ToString());
      }
    }
    absl::MutexLock lock(&mu_);
    in_flight_ = 0;
    if (retry.empty()) {
      backoff.Reset();
      NoteBacklogLocked();
      continue;
    }
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
    // Heartbeats queued meanwhile supersede the retried worker rows.
    CoalesceLocked();
    NoteBacklogLocked();
    mu_.AwaitWithTimeout(absl::Condition(&stop_), *backoff.Next());
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
      absl::Status s = StoreOrShedMetrics(merged);
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
  absl::Status first_failure;
  std::vector<Op> retry;
  std::vector<std::pair<Done, absl::Status>> answers;
  for (size_t k = 0; k < batch.size(); ++k) {
    const absl::Status& s = results[k];
    if (!s.ok()) {
      ++failures;
      store_failed |= StoreFailure(s);
      if (first_failure.ok()) first_failure = s;
    }
    const bool is_metrics =
        std::holds_alternative<std::vector<MetricRow>>(batch[k].payload);
    if (!s.ok() && StoreFailure(s) && !is_metrics &&
        !std::holds_alternative<Barrier>(batch[k].payload)) {
      retry.push_back(std::move(batch[k]));  // job state is never dropped
      continue;
    }
    if (batch[k].done) {
      answers.emplace_back(
          std::move(batch[k].done),
          s.ok() || !StoreFailure(s)
              ? s
              : absl::UnavailableError(absl::StrCat("store unavailable: ", s.message())));
    }
  }
  if (failures > 0) {
    LogFailure(first_failure, failures, retry.size());
  } else if (failed_rounds_ > 0) {
    spdlog::info("store writes succeed again after {} failed round(s)", failed_rounds_);
    failed_rounds_ = 0;
    last_logged_error_.clear();
  }
  {
    absl::MutexLock lock(&mu_);
    failed_writes_ += failures;
    healthy_ = !store_failed;
    kept_jobs_.clear();
    for (const Op& op : retry) AddJobIds(op, kept_jobs_);
    in_flight_ = retry.size();  // the rest is answered below
  }
  for (auto& [done, status] : answers) done(std::move(status));
  return retry;
}

void StoreWriter::LogFailure(const absl::Status& first, int64_t failures, size_t kept) {
  ++failed_rounds_;
  const absl::Time now = absl::Now();
  const std::string error = first.ToString();
  if (error == last_logged_error_ && now - last_logged_at_ < absl::Seconds(30)) return;
  last_logged_error_ = error;
  last_logged_at_ = now;
  size_t queued = 0;
  int64_t coalesced = 0;
  {
    absl::MutexLock lock(&mu_);
    queued = queue_.size();
    coalesced = coalesced_;
  }
  spdlog::error(
      "store write failed: {} ({} write(s) of this round; {} state write(s) kept for "
      "retry, {} queued behind them; {} superseded worker update(s) coalesced so far)",
      error, failures, kept, queued, coalesced);
}

}  // namespace tessera
