// SearchToProto: a stored search as its readers see it (tessera.v1.Search):
// the search's record and one SearchTrial per trial started, built from the
// rows of the trials' jobs (store.h, SearchJobRecord). Each trial has its
// values, its jobs in rung order, the metric at the end of each rung done,
// its best and where that was recorded (the rung, ties going to the later
// one, its job and the step of the value: the checkpoint that scored it),
// and a status: "running"; "paused" (its rung done, not promoted yet);
// "stopped" (not promoted, or cut short, when the search ended); "completed"
// (it trained max_length); "failed". The best trial is the one with the best
// metric, ties going to the higher rung, then the lower index.
//
// Thread-safety: a pure function.
#ifndef TESSERA_COORDINATOR_CORE_SEARCH_VIEW_H_
#define TESSERA_COORDINATOR_CORE_SEARCH_VIEW_H_

#include <cstdint>
#include <map>
#include <vector>

#include "coordinator/store/store.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

// `jobs` are the search's rows ordered by (trial, rung); `live` holds the
// current state of the jobs whose rows have not recorded an end yet, by job
// id (a job missing there counts as QUEUED).
tessera::v1::Search SearchToProto(const SearchRecord& search,
                                  const std::vector<SearchJobRecord>& jobs,
                                  const std::map<int64_t, tessera::v1::JobState>& live);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_SEARCH_VIEW_H_
