#include "worker/trainer/run/metrics_reporter.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/json_writer.h"

namespace tessera::trainer {
namespace {

// One line of the metrics file: {"rank":0,"step":12,"name":"loss",
// "value":0.25,"unix_ms":...}, values as %.17g as the file always had them
// (NaN and infinities as null).
std::string MetricsFileLine(int rank, int64_t step, const std::string& name, double value,
                            int64_t unix_ms) {
  JsonWriter line({.doubles = JsonWriter::Doubles::kSeventeenDigits});
  line.BeginObject()
      .Key("rank")
      .Int(rank)
      .Key("step")
      .Int(step)
      .Key("name")
      .String(name)
      .Key("value")
      .Double(value)
      .Key("unix_ms")
      .Int(unix_ms)
      .EndObject();
  return line.text();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsReporter>> MetricsReporter::Create(
    MetricsReporterOptions options, CoordinatorClient* coordinator) {
  std::FILE* file = nullptr;
  if (!options.metrics_file.empty()) {
    file = std::fopen(options.metrics_file.c_str(), "w");
    if (file == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("cannot create metrics file ",
                                                        options.metrics_file, ": ",
                                                        std::strerror(errno)));
    }
  }
  return std::unique_ptr<MetricsReporter>(
      new MetricsReporter(std::move(options), coordinator, file));
}

MetricsReporter::MetricsReporter(MetricsReporterOptions options,
                                 CoordinatorClient* coordinator, std::FILE* file)
    : options_(std::move(options)),
      coordinator_(coordinator),
      file_(file),
      last_send_(absl::Now()),
      backoff_(
          {.initial_delay = options_.initial_backoff, .max_delay = options_.max_backoff},
          clock_) {
  if (coordinator_ != nullptr) sender_ = std::thread([this] { SenderLoop(); });
}

MetricsReporter::~MetricsReporter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    changed_.SignalAll();
  }
  if (sender_.joinable()) sender_.join();
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsReporter::Report(int64_t step,
                             const std::vector<std::pair<std::string, double>>& values) {
  const int64_t unix_ms = absl::ToUnixMillis(absl::Now());
  if (options_.progress != nullptr) {
    std::string line = absl::StrCat("[rank ", options_.rank, "] step ", step, " |");
    for (const auto& [name, value] : values) {
      absl::StrAppend(&line, " ", name, "=", absl::StrFormat("%.5g", value));
    }
    *options_.progress << line << std::endl;
  }
  if (file_ != nullptr) {
    std::string lines;
    for (const auto& [name, value] : values) {
      absl::StrAppend(&lines, MetricsFileLine(options_.rank, step, name, value, unix_ms),
                      "\n");
    }
    std::fputs(lines.c_str(), file_);
    std::fflush(file_);
  }
  if (coordinator_ == nullptr) return;

  absl::MutexLock lock(&mu_);
  if (limit_reached_) {
    dropped_ += static_cast<int64_t>(values.size());
    return;
  }
  for (const auto& [name, value] : values) {
    pending_.push_back(MetricSample{step, name, value, unix_ms});
  }
  int64_t dropped_now = 0;
  while (static_cast<int64_t>(pending_.size()) > options_.max_buffered_points) {
    pending_.pop_front();
    ++dropped_now;
  }
  if (dropped_now > 0 && dropped_ == 0) {
    std::cerr << "tessera-train: metric queue full (" << options_.max_buffered_points
              << " points); dropping the oldest until the coordinator is reachable"
              << std::endl;
  }
  dropped_ += dropped_now;
  changed_.SignalAll();
}

absl::Time MetricsReporter::NextSendTimeLocked() const {
  if (pending_.empty()) return absl::InfiniteFuture();
  if (flush_waiters_ > 0) {
    // A flush retries at the initial backoff pace, not the grown one.
    return failing_ ? last_send_ + options_.initial_backoff : absl::InfinitePast();
  }
  if (static_cast<int64_t>(pending_.size()) >= options_.max_batch_points) {
    return retry_after_;
  }
  return std::max(last_send_ + options_.flush_interval, retry_after_);
}

void MetricsReporter::SenderLoop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    const absl::Time due = NextSendTimeLocked();
    if (absl::Now() < due) {
      changed_.WaitWithDeadline(&mu_, due);
      continue;
    }
    const size_t count =
        std::min(pending_.size(), static_cast<size_t>(options_.max_batch_points));
    std::vector<MetricSample> batch(std::make_move_iterator(pending_.begin()),
                                    std::make_move_iterator(pending_.begin() + count));
    pending_.erase(pending_.begin(), pending_.begin() + count);
    in_flight_ = true;

    mu_.Unlock();
    const absl::Status status = coordinator_->ReportMetrics(batch);
    mu_.Lock();

    in_flight_ = false;
    last_send_ = absl::Now();
    if (absl::IsResourceExhausted(status)) {
      // The job's metric limit on the coordinator: later points would be
      // refused too. Training goes on; the local metrics file keeps them.
      std::cerr << "tessera-train: the coordinator stores no more metrics for this job ("
                << status.message() << "); later metrics are not sent, training goes on"
                << std::endl;
      in_flight_ = false;
      dropped_ += static_cast<int64_t>(batch.size() + pending_.size());
      pending_.clear();
      limit_reached_ = true;
      changed_.SignalAll();
      continue;
    }
    if (status.ok()) {
      if (failing_) {
        std::cerr << "tessera-train: metric delivery to the coordinator recovered"
                  << std::endl;
      }
      failing_ = false;
      backoff_.Reset();
      retry_after_ = absl::InfinitePast();
    } else {
      if (!failing_) {
        std::cerr << "tessera-train: cannot deliver metrics to the coordinator ("
                  << status << "); keeping up to " << options_.max_buffered_points
                  << " points and retrying" << std::endl;
      }
      failing_ = true;
      pending_.insert(pending_.begin(), std::make_move_iterator(batch.begin()),
                      std::make_move_iterator(batch.end()));
      while (static_cast<int64_t>(pending_.size()) > options_.max_buffered_points) {
        pending_.pop_front();
        ++dropped_;
      }
      retry_after_ = last_send_ + *backoff_.Next();  // never empty: no deadline
    }
    changed_.SignalAll();
  }
}

absl::Status MetricsReporter::Flush(absl::Duration timeout) {
  if (file_ != nullptr) std::fflush(file_);
  if (coordinator_ == nullptr) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  ++flush_waiters_;
  changed_.SignalAll();
  while (!pending_.empty() || in_flight_) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) break;
  }
  --flush_waiters_;
  if (!pending_.empty() || in_flight_) {
    return absl::DeadlineExceededError(absl::StrCat(
        pending_.size(), " metric points (plus any batch in flight) not ",
        "delivered to the coordinator within ", absl::FormatDuration(timeout)));
  }
  return absl::OkStatus();
}

int64_t MetricsReporter::dropped_points() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

}  // namespace tessera::trainer
