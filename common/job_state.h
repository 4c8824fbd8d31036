// The names of a job's and a rank's states: the one place that says which job
// states are terminal and how each state is spelled in the store, the JSON API,
// tessctl and the dashboard.
//
// Job states are the proto enum (tessera.v1.JobState); their text form is the
// enum name without its "JOB_STATE_" prefix ("RUNNING"). Rank states are the
// C++ enum RankState; their text form is lower case ("running"), as stored in
// the ranks table and sent in RankInfo.state.
//
// Thread-safety: free functions without state.
#ifndef TESSERA_COMMON_JOB_STATE_H_
#define TESSERA_COMMON_JOB_STATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

// SUCCEEDED, FAILED and CANCELLED: the job will not run again.
bool IsTerminal(v1::JobState state);

// "RUNNING" for JOB_STATE_RUNNING; "STATE_<n>" for a number outside the enum.
std::string JobStateName(v1::JobState state);

// Parses "running", "RUNNING" or "JOB_STATE_RUNNING" (any case). UNSPECIFIED and
// unknown names are InvalidArgument, naming the accepted ones.
absl::StatusOr<v1::JobState> ParseJobState(absl::string_view text);

// The names of every state but UNSPECIFIED, in enum order ("QUEUED", ...).
std::vector<std::string> JobStateNames();

// The legal changes of a job's state, the one table every change goes through
// (JobManager::Transition):
//
//   QUEUED    -> SCHEDULED   placed (attempt N)
//   QUEUED    -> CANCELLED   cancelled while waiting
//   QUEUED    -> FAILED      can never be placed (e.g. its Slurm pool is gone)
//   SCHEDULED -> RUNNING     every rank joined the rendezvous
//   SCHEDULED -> QUEUED      a rank failed or was lost before all joined, a
//                            rendezvous timed out, or a drain preempted it:
//                            requeued for attempt N+1
//   SCHEDULED -> FAILED      the same, with no restart left
//   SCHEDULED -> CANCELLED
//   SCHEDULED -> SUCCEEDED   every rank exited with code 0 before all had
//                            joined (a program that needs no peers)
//   RUNNING   -> SUCCEEDED   every rank exited with code 0
//   RUNNING   -> QUEUED      a rank failed, was lost or hung, or the job was
//                            preempted: requeued for attempt N+1
//   RUNNING   -> FAILED      the same, with no restart left
//   RUNNING   -> CANCELLED
//
// Nothing leaves SUCCEEDED, FAILED or CANCELLED, nothing reaches RUNNING but
// from SCHEDULED, nothing goes back to SCHEDULED but through QUEUED (a new
// attempt is placed from the queue), and a state never changes to itself.
bool IsLegalTransition(v1::JobState from, v1::JobState to);

// OkStatus for a legal change; InternalError naming both states otherwise
// ("illegal job state change RUNNING -> SCHEDULED").
absl::Status CheckTransition(v1::JobState from, v1::JobState to);

// Where one rank of one attempt is: assigned to a worker slot, running there
// (the worker reported its pid), or exited (exit code or signal recorded).
enum class RankState { kAssigned, kRunning, kExited };

// "assigned", "running" or "exited".
absl::string_view RankStateName(RankState state);

// The inverse of RankStateName; anything else is InvalidArgument.
absl::StatusOr<RankState> ParseRankState(absl::string_view text);

}  // namespace tessera

#endif  // TESSERA_COMMON_JOB_STATE_H_
