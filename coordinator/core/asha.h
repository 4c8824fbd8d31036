// Asha: the decisions of asynchronous successive halving (ASHA; Li et al.,
// "A System for Massively Parallel Hyperparameter Tuning", MLSys 2020,
// Algorithm 2), over what a search has recorded: which (trial, rung) jobs
// were started, which finished with what metric, and which failed.
//
// Rung k trains a trial to the k-th length of the search's rungs (the last
// is max_length). When a slot frees, Next() looks at the rungs from the
// highest below the top down to 0, and promotes the best trial of the first
// rung that has one in the top floor(n/eta) of its n recorded results and
// not yet promoted; failing that it starts a new trial, while fewer than
// max_trials have started; failing that the search waits for its running
// jobs, or is done. A search with one rung (grid, random) only starts trials.
//
// Ties are broken the same way every time: the better metric, then the lower
// trial index; a NaN metric ranks below every number. Trials are numbered in
// the order they start, from 0.
//
// Everything Next() decides follows from the records alone, in whatever order
// they are given, so a restarted coordinator rebuilds the same state from its
// store (search_manager.h).
//
// A value type without locking; one instance is used by one thread at a time.
#ifndef TESSERA_COORDINATOR_CORE_ASHA_H_
#define TESSERA_COORDINATOR_CORE_ASHA_H_

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace tessera {

class Asha {
 public:
  struct Options {
    int32_t rungs = 1;             // at least 1; the last trains to max_length
    int32_t reduction_factor = 3;  // eta, at least 2
    int32_t max_trials = 1;
    bool maximize = true;  // a higher metric is better
  };

  // What to do when a slot frees.
  struct Decision {
    enum class Kind {
      kPromote,  // train `trial` on to the end of `rung` (resuming it)
      kStart,    // start trial `trial`, to the end of rung 0
      kWait,     // nothing to start until a running job ends
      kDone,     // nothing runs and nothing is left to start
    };
    Kind kind = Kind::kDone;
    int32_t trial = -1;
    int32_t rung = 0;

    bool operator==(const Decision&) const = default;
  };

  // One recorded result of a rung.
  struct Result {
    int32_t trial = 0;
    double metric = 0;
  };

  explicit Asha(Options options);

  // Records a job of `trial` for `rung` as started (running), finished with
  // `metric`, or failed. A later record of the same (trial, rung) replaces
  // the earlier one.
  void Started(int32_t trial, int32_t rung);
  void Finished(int32_t trial, int32_t rung, double metric);
  void Failed(int32_t trial, int32_t rung);

  // The next decision; Started() records it once its job is submitted.
  Decision Next() const;

  // Rung `rung`'s recorded results, best first.
  std::vector<Result> RungResults(int32_t rung) const;
  // Trials started (the next new trial's index), and jobs running.
  int32_t trials_started() const;
  int32_t running() const;
  const Options& options() const { return options_; }

 private:
  enum class RunState { kRunning, kDone, kFailed };
  struct Run {
    RunState state = RunState::kRunning;
    double metric = 0;
  };

  // Whether result `a` ranks above result `b`.
  bool Better(const Result& a, const Result& b) const;

  const Options options_;
  std::map<std::pair<int32_t, int32_t>, Run> runs_;  // by (trial, rung)
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_ASHA_H_
