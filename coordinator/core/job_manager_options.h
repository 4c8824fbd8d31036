// The coordinator core's options: the limits applied to submitted specs, the
// timing of worker sessions and trainer leases, the per-user and per-job
// limits, fair share and the watchdog. main.cc fills them from flags; every
// part of the JobManager (job_manager.h) reads them.
//
// Thread-safety: plain values.
#ifndef TESSERA_COORDINATOR_CORE_JOB_MANAGER_OPTIONS_H_
#define TESSERA_COORDINATOR_CORE_JOB_MANAGER_OPTIONS_H_

#include <cstdint>

#include "absl/time/time.h"
#include "common/job_spec.h"
#include "coordinator/core/rank_watch.h"

namespace tessera {

// What one user may hold at once. The defaults fit a lab of about 20 people
// sharing a few dozen slots. Admins are exempt. Exceeding one is
// ResourceExhausted, naming the limit and its flag.
struct UserLimits {
  // Jobs a user may have queued (waiting for slots) at once (--max-queued-jobs).
  int max_queued_jobs = 100;
  // Ranks a user may have placed (scheduled or running) at once
  // (--max-running-ranks).
  int max_running_ranks = 64;
  // The share of the cluster's slots one user may hold while another user's
  // job waits (--max-slot-share). An idle cluster is used whole.
  double max_slot_share = 0.5;
  // The highest `priority` a non-admin may submit (--max-user-priority).
  int max_priority = 10;
  // The largest memory_per_rank a non-admin's job may ask for, in bytes
  // (--max-memory-per-rank); 0: no cap. Under a cap a job must set one.
  int64_t max_memory_per_rank_bytes = 0;
};

// What one job may store (--max-metric-rows, --max-log-bytes,
// --max-metric-names). Past a limit, reports are refused with ResourceExhausted
// and the trainer or worker stops sending them; the job itself goes on.
struct JobLimits {
  int64_t max_metric_rows = 2'000'000;
  int64_t max_log_bytes = int64_t{256} << 20;
  int max_metric_names = 64;
};

struct JobManagerOptions {
  // Limits applied to submitted specs.
  SpecLimits spec_limits;
  // How often workers are asked to heartbeat.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // A worker silent for longer than this is suspect: it gets no new ranks.
  absl::Duration worker_suspect_after = absl::Seconds(3);
  // A worker silent for longer than this is declared dead: its ranks count as
  // lost (their jobs fail or restart) and its session epoch is fenced, so when
  // it comes back it must register again and stops what it still runs.
  absl::Duration worker_dead_after = absl::Seconds(15);
  // An attempt whose ranks have not all joined the rendezvous this long after
  // placement fails, naming the missing ranks.
  absl::Duration rendezvous_timeout = absl::Minutes(5);
  // How long a blocked job lets later jobs backfill before it holds the queue.
  absl::Duration reserve_after = absl::Minutes(10);
  // Most metric points accepted in one report.
  int max_points_per_report = 10000;
  // The trainer lease (RenewLeaseRequest in tessera.proto): a trainer that
  // has not renewed it for this long stops itself, so a coordinator down for
  // longer stops every running job (they restart from their checkpoints when
  // allowed). A job whose ranks were lost with their worker restarts only
  // once each lost rank is confirmed stopped by its worker or its lease has
  // run out here, which after a partition takes about this long.
  absl::Duration trainer_lease = absl::Seconds(90);
  // The lease tessera-train assumes until its first renewal succeeds
  // (kFirstContactLease in worker/trainer/run/lease.h).
  absl::Duration trainer_first_contact_lease = absl::Seconds(15);
  // A lost rank's lease has run out here `lease * (1 + ratio) + margin` after
  // the last renewal received: room for clocks that run at different rates.
  double trainer_lease_margin_ratio = 0.1;
  absl::Duration trainer_lease_margin = absl::Seconds(1);
  // Per-user and per-job limits.
  UserLimits user_limits;
  JobLimits job_limits;
  // Fair share: the queue is ordered by priority, then by each owner's
  // fair-share factor (fair_share.h), then by age. Off (--no-fair-share): by
  // priority, then age, first come first served.
  bool fair_share = true;
  // Fair share: the half-life of each user's recorded usage (slot-seconds).
  absl::Duration usage_half_life = absl::Hours(24);
  // How often the usage is saved to the store (it survives restarts).
  absl::Duration usage_save_interval = absl::Minutes(1);
  // ListJobs' page size when the request names none, and the largest allowed.
  int default_list_limit = 100;
  int max_list_limit = 1000;
  // The watchdog over running attempts (rank_watch.h); a job's spec may
  // override it.
  RankWatchOptions watchdog;
  // How often trainers report progress (and so renew their lease) at least
  // (--progress-interval): RenewLeaseResponse.report_every_ms.
  absl::Duration progress_report_interval = absl::Seconds(2);
  // How long a drain waits for ranks to checkpoint and exit before it stops
  // them (--drain-timeout); DrainWorker may name another.
  absl::Duration drain_timeout = absl::Minutes(2);
  // A heartbeat reporting exits waits at most this long for them to be
  // durable before it acknowledges them (unacknowledged exits are reported
  // again).
  absl::Duration exit_ack_timeout = absl::Seconds(5);
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_JOB_MANAGER_OPTIONS_H_
