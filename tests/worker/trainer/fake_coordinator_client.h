// A CoordinatorClient for tests: records every metric point it is given and
// fails a chosen number of ReportMetrics calls (or all of them) with UNAVAILABLE,
// as an unreachable coordinator would. Lease renewals record the progress
// report they carry and answer with a settable grant.
//
// Thread-safe: the reporter's sender thread and the test thread use it together.
#ifndef TESSERA_TESTS_WORKER_TRAINER_FAKE_COORDINATOR_CLIENT_H_
#define TESSERA_TESTS_WORKER_TRAINER_FAKE_COORDINATOR_CLIENT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/trainer/run/coordinator_client.h"

namespace tessera::trainer::testing {

class FakeCoordinatorClient : public CoordinatorClient {
 public:
  absl::StatusOr<RendezvousResult> Rendezvous(const std::string& bootstrap,
                                              const std::string& backend) override {
    RendezvousResult result;
    result.bootstrap = bootstrap;
    result.backend = backend;
    return result;
  }

  absl::Status ReportMetrics(const std::vector<MetricSample>& points) override {
    absl::MutexLock lock(&mu_);
    ++metric_calls_;
    if (fail_all_ || failures_left_ > 0) {
      if (failures_left_ > 0) --failures_left_;
      return absl::UnavailableError("coordinator unreachable (fake)");
    }
    received_.insert(received_.end(), points.begin(), points.end());
    batch_sizes_.push_back(points.size());
    return absl::OkStatus();
  }

  absl::Status ReportResult(const TrainingResult& /*result*/) override {
    return absl::OkStatus();
  }

  absl::StatusOr<LeaseGrant> RenewLease(absl::Duration /*deadline*/,
                                        const ProgressReport& progress) override {
    absl::MutexLock lock(&mu_);
    progress_reports_.push_back(progress);
    return lease_grant_;
  }

  // What RenewLease answers from now on.
  void SetLeaseGrant(absl::StatusOr<LeaseGrant> grant) {
    absl::MutexLock lock(&mu_);
    lease_grant_ = std::move(grant);
  }
  // The progress reports the renewals carried, in order.
  std::vector<ProgressReport> progress_reports() const {
    absl::MutexLock lock(&mu_);
    return progress_reports_;
  }

  // The next `n` ReportMetrics calls fail.
  void FailNext(int n) {
    absl::MutexLock lock(&mu_);
    failures_left_ = n;
  }
  // Every ReportMetrics call fails while `fail` is true.
  void FailAll(bool fail) {
    absl::MutexLock lock(&mu_);
    fail_all_ = fail;
  }

  std::vector<MetricSample> received() const {
    absl::MutexLock lock(&mu_);
    return received_;
  }
  // Sizes of the successful ReportMetrics calls, in order.
  std::vector<size_t> batch_sizes() const {
    absl::MutexLock lock(&mu_);
    return batch_sizes_;
  }
  int metric_calls() const {
    absl::MutexLock lock(&mu_);
    return metric_calls_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<MetricSample> received_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> batch_sizes_ ABSL_GUARDED_BY(mu_);
  int failures_left_ ABSL_GUARDED_BY(mu_) = 0;
  bool fail_all_ ABSL_GUARDED_BY(mu_) = false;
  int metric_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<ProgressReport> progress_reports_ ABSL_GUARDED_BY(mu_);
  absl::StatusOr<LeaseGrant> lease_grant_ ABSL_GUARDED_BY(mu_) = LeaseGrant{
      .lease = absl::Seconds(90), .report_every = absl::Seconds(2)};
};

}  // namespace tessera::trainer::testing

#endif  // TESSERA_TESTS_WORKER_TRAINER_FAKE_COORDINATOR_CLIENT_H_
