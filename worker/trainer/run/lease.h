// The trainer's lease with the coordinator: a rank that cannot renew it in time
// stops itself, so that the coordinator may restart its job elsewhere once the
// lease has run out without the rank ever running twice.
//
// LeaseState is the arithmetic: the lease runs out `lease` after the SEND time
// of the last renewal that succeeded (before the first one: kFirstContactLease
// after the process started). The coordinator counts from when it RECEIVED
// that renewal, which is later, and adds a margin, so the trainer always stops
// before the coordinator's deadline (see RenewLeaseRequest in tessera.proto).
//
// LeaseKeeper renews from one background thread: every min(lease/4,
// report_every) while renewals succeed, every `retry_every` while they fail.
// Each renewal carries the rank's progress report (progress.h), so the period
// is also the reporting period: report_every is what the coordinator's last
// answer asked for (RenewLeaseResponse.report_every_ms; 0: lease/4), 2 s
// before the first answer. When the lease runs
// out, or the coordinator answers that the rank is no longer current
// (ABORTED / NOT_FOUND), it calls `fence`; a coordinator without leases
// (UNIMPLEMENTED) turns it off, which in tessera-train logs the
// reason and ends the process at once with kTrainerExitLeaseLost (FenceProcess).
// Step() is one iteration of that loop; tests drive it with a fake clock.
// ReportNow() asks the started keeper for one renewal at once and waits for it,
// so that a rank about to exit can report its final progress (a preempted
// rank: the step it checkpointed at).
//
// Plain C++ (no gRPC, no LibTorch): the renewal is a callback.
// Thread-safety: Start(), ReportNow() and the destructor from the owning
// thread; Step() only from one thread at a time (the keeper's own once
// started).
#ifndef TESSERA_WORKER_TRAINER_RUN_LEASE_H_
#define TESSERA_WORKER_TRAINER_RUN_LEASE_H_

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/file_io.h"
#include "common/trainer_exit.h"
#include "worker/trainer/run/coordinator_client.h"
#include "worker/trainer/run/progress.h"

namespace tessera::trainer {

// The lease a trainer counts from its process start until its first renewal
// succeeds. The coordinator assumes the same for ranks it has not heard from
// (JobManagerOptions::trainer_first_contact_lease).
inline constexpr absl::Duration kFirstContactLease = absl::Seconds(15);

class LeaseState {
 public:
  // `start`: when the process started, on the clock later calls use.
  explicit LeaseState(absl::Time start, absl::Duration first_contact = kFirstContactLease)
      : last_sent_(start), lease_(first_contact) {}

  // A renewal sent at `sent` succeeded; the coordinator's lease is `lease`.
  void Renewed(absl::Time sent, absl::Duration lease) {
    if (sent >= last_sent_) last_sent_ = sent;
    lease_ = lease;
    renewed_ = true;
  }

  absl::Time expires() const { return last_sent_ + lease_; }
  bool Expired(absl::Time now) const { return now > expires(); }
  absl::Duration lease() const { return lease_; }
  // Send time of the last successful renewal (the process start before one).
  absl::Time last_sent() const { return last_sent_; }
  bool renewed() const { return renewed_; }

 private:
  absl::Time last_sent_;
  absl::Duration lease_;
  bool renewed_ = false;
};

struct LeaseKeeperOptions {
  // Lease assumed until the first renewal succeeds.
  absl::Duration first_contact = kFirstContactLease;
  // Pause between renewals while they fail.
  absl::Duration retry_every = absl::Seconds(1);
  // Longest deadline of one renewal (never past the lease's end).
  absl::Duration max_rpc_deadline = absl::Seconds(5);
  // Renewal (and progress report) period until the coordinator says otherwise.
  absl::Duration report_every = absl::Seconds(2);
};

class LeaseKeeper {
 public:
  // One renewal with the given deadline: the coordinator's answer, or an error.
  using Renew = std::function<absl::StatusOr<LeaseGrant>(absl::Duration deadline)>;
  // Ends the rank; in tessera-train it does not return (FenceProcess).
  using Fence = std::function<void(const std::string& why)>;
  using Log = std::function<void(const std::string& line)>;

  // `now` is a monotonic clock and `start` the process start on it.
  LeaseKeeper(Renew renew, Fence fence, Log log, std::function<absl::Time()> now,
              absl::Time start, LeaseKeeperOptions options = {})
      : renew_(std::move(renew)),
        fence_(std::move(fence)),
        log_(std::move(log)),
        now_(std::move(now)),
        options_(options),
        state_(start, options.first_contact),
        report_every_(options.report_every) {}

  ~LeaseKeeper() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Starts the background thread; its first renewal goes out at once.
  void Start() {
    thread_ = std::thread([this] {
      while (true) {
        {
          absl::MutexLock lock(&mu_);
          if (stop_) break;
          renew_now_ = false;
          ++steps_started_;
        }
        const absl::Duration wait = Step();
        absl::MutexLock lock(&mu_);
        ++steps_done_;
        if (fenced_ || disabled_) break;
        mu_.AwaitWithTimeout(absl::Condition(this, &LeaseKeeper::Woken), wait);
      }
      absl::MutexLock lock(&mu_);
      exited_ = true;
    });
  }

  // Makes the started keeper renew (and report progress) at once, and waits
  // up to `timeout` for a renewal that began after this call to finish.
  // Returns whether one did; false at once for a keeper that stopped renewing
  // (fenced, or a coordinator without leases) or was never started.
  bool ReportNow(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    if (!thread_.joinable() || exited_) return false;
    report_wanted_ = steps_started_ + 1;
    renew_now_ = true;
    mu_.AwaitWithTimeout(absl::Condition(this, &LeaseKeeper::ReportDoneOrOver), timeout);
    return steps_done_ >= report_wanted_;
  }

  // Checks the lease, renews it once, and returns how long to wait before the
  // next step: never past the lease's end, so that it is noticed in time.
  absl::Duration Step() {
    if (fenced_ || disabled_) return absl::InfiniteDuration();
    if (CheckExpired()) return absl::InfiniteDuration();
    const absl::Time sent = now_();
    const absl::Duration deadline =
        std::max(absl::Milliseconds(1),
                 std::min(options_.max_rpc_deadline, state_.expires() - sent));
    absl::StatusOr<LeaseGrant> grant = renew_(deadline);
    const absl::StatusOr<absl::Duration> lease =
        grant.ok() ? absl::StatusOr<absl::Duration>(grant->lease)
                   : absl::StatusOr<absl::Duration>(grant.status());
    absl::Duration next = options_.retry_every;
    if (lease.ok() && *lease > absl::ZeroDuration()) {
      if (failures_ > 0) {
        log_(absl::StrCat("lease renewed again after ", failures_, " failed attempt(s)"));
      }
      failures_ = 0;
      state_.Renewed(sent, *lease);
      report_every_ =
          grant->report_every > absl::ZeroDuration() ? grant->report_every : *lease / 4;
      next = std::min(*lease / 4, report_every_);
    } else if (!lease.ok() && absl::IsUnimplemented(lease.status())) {
      // A coordinator older than leases: it does not wait for them either.
      log_("the coordinator does not keep trainer leases; running without one");
      disabled_ = true;
      return absl::InfiniteDuration();
    } else if (!lease.ok() &&
               (absl::IsAborted(lease.status()) || absl::IsNotFound(lease.status()))) {
      Fenced(absl::StrCat("the coordinator no longer counts this rank (",
                          lease.status().message(),
                          "): stopping so the rank cannot run twice"));
      return absl::InfiniteDuration();
    } else {
      if (failures_++ == 0) {
        log_(absl::StrCat("lease renewal failed (",
                          lease.ok() ? "empty lease" : lease.status().ToString(),
                          "); retrying every ",
                          absl::FormatDuration(options_.retry_every),
                          "; the rank stops unless one succeeds within ",
                          absl::FormatDuration(
                              absl::Trunc(state_.expires() - sent, absl::Seconds(1)))));
      }
    }
    if (CheckExpired()) return absl::InfiniteDuration();
    const absl::Duration left = state_.expires() - now_();
    return std::max(absl::ZeroDuration(), std::min(next, left + absl::Milliseconds(1)));
  }

  bool fenced() const { return fenced_; }
  const LeaseState& state() const { return state_; }
  // The reporting period the coordinator asked for last (the option before).
  absl::Duration report_every() const { return report_every_; }

 private:
  bool Woken() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || renew_now_; }
  bool ReportDoneOrOver() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return exited_ || steps_done_ >= report_wanted_;
  }

  bool CheckExpired() {
    const absl::Time now = now_();
    if (!state_.Expired(now)) return false;
    Fenced(absl::StrCat(
        "lost the coordinator for ",
        absl::FormatDuration(absl::Trunc(now - state_.last_sent(), absl::Seconds(1))),
        ": stopping so the rank cannot run twice (lease ",
        absl::FormatDuration(state_.lease()),
        state_.renewed() ? ", counted from the last renewal sent"
                         : ", counted from the start; never renewed",
        ")"));
    return true;
  }

  void Fenced(const std::string& why) {
    fenced_ = true;
    fence_(why);
  }

  const Renew renew_;
  const Fence fence_;
  const Log log_;
  const std::function<absl::Time()> now_;
  const LeaseKeeperOptions options_;
  LeaseState state_;
  absl::Duration report_every_;
  int failures_ = 0;
  bool fenced_ = false;
  bool disabled_ = false;  // the coordinator has no leases
  // The started keeper's loop: stop, renew at once, and its progress.
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool renew_now_ ABSL_GUARDED_BY(mu_) = false;
  bool exited_ ABSL_GUARDED_BY(mu_) = false;
  int64_t steps_started_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t steps_done_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t report_wanted_ ABSL_GUARDED_BY(mu_) = 0;  // the step ReportNow waits for
  std::thread thread_;  // Last: runs Step(), which uses everything above.
};

// The renewal of tessera-train: `client`'s RenewLease carrying `progress`'s
// snapshot at the moment of each renewal. Both must outlive the keeper.
inline LeaseKeeper::Renew RenewWithProgress(CoordinatorClient& client,
                                            const ProgressTracker& progress) {
  return [&client, &progress](absl::Duration deadline) {
    return client.RenewLease(deadline, progress.Snapshot());
  };
}

// A monotonic clock as absl::Time (only differences mean anything).
inline absl::Time MonotonicNow() {
  return absl::UnixEpoch() +
         absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

// How long ago this process was forked (by the worker, after it received the
// launch order), from /proc/self/stat; zero when unknown. Counting the first
// contact lease from there rather than from main() keeps the trainer's clock
// ahead of the coordinator's however slowly the executable loads.
inline absl::Duration ProcessAge() {
  const absl::StatusOr<std::string> stat = ReadFile("/proc/self/stat", 4096);
  if (!stat.ok()) return absl::ZeroDuration();
  const std::string& text = *stat;
  const size_t paren = text.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return absl::ZeroDuration();
  std::istringstream fields(text.substr(paren + 2));
  std::string field;
  // Field 3 (state) comes first after the name; starttime is field 22.
  for (int i = 3; i < 22 && fields >> field; ++i) {
  }
  unsigned long long start_ticks = 0;
  if (!(fields >> start_ticks)) return absl::ZeroDuration();
  const long hz = sysconf(_SC_CLK_TCK);
  timespec boot{};
  if (hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &boot) != 0) return absl::ZeroDuration();
  const absl::Duration age = absl::DurationFromTimespec(boot) -
                             absl::Seconds(static_cast<double>(start_ticks) / hz);
  return std::clamp(age, absl::ZeroDuration(), absl::Hours(1));
}

// The fence of tessera-train: says why on stderr, then ends the process at
// once (no destructors, no collective teardown; peers see the link drop).
[[noreturn]] inline void FenceProcess(const std::string& why) {
  std::fprintf(stderr, "tessera-train: %s\n", why.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  std::_Exit(kTrainerExitLeaseLost);
}

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_LEASE_H_
