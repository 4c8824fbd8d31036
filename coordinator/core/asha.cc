#include "coordinator/core/asha.h"

#include <algorithm>
#include <cmath>

namespace tessera {

Asha::Asha(Options options) : options_(options) {}

void Asha::Started(int32_t trial, int32_t rung) {
  runs_[{trial, rung}] = Run{RunState::kRunning, 0};
}

void Asha::Finished(int32_t trial, int32_t rung, double metric) {
  runs_[{trial, rung}] = Run{RunState::kDone, metric};
}

void Asha::Failed(int32_t trial, int32_t rung) {
  runs_[{trial, rung}] = Run{RunState::kFailed, 0};
}

bool Asha::Better(const Result& a, const Result& b) const {
  const bool a_nan = std::isnan(a.metric);
  const bool b_nan = std::isnan(b.metric);
  if (a_nan != b_nan) return b_nan;
  if (!a_nan && a.metric != b.metric) {
    return options_.maximize ? a.metric > b.metric : a.metric < b.metric;
  }
  return a.trial < b.trial;
}

std::vector<Asha::Result> Asha::RungResults(int32_t rung) const {
  std::vector<Result> results;
  for (const auto& [key, run] : runs_) {
    if (key.second == rung && run.state == RunState::kDone) {
      results.push_back(Result{key.first, run.metric});
    }
  }
  std::sort(results.begin(), results.end(),
            [this](const Result& a, const Result& b) { return Better(a, b); });
  return results;
}

int32_t Asha::trials_started() const {
  // Trials start in index order, so the next index is one past the highest.
  int32_t next = 0;
  for (const auto& [key, run] : runs_) next = std::max(next, key.first + 1);
  return next;
}

int32_t Asha::running() const {
  int32_t n = 0;
  for (const auto& [key, run] : runs_) n += run.state == RunState::kRunning;
  return n;
}

Asha::Decision Asha::Next() const {
  const int32_t eta = std::max(2, options_.reduction_factor);
  for (int32_t rung = options_.rungs - 2; rung >= 0; --rung) {
    const std::vector<Result> results = RungResults(rung);
    const size_t top = results.size() / static_cast<size_t>(eta);
    for (size_t i = 0; i < top; ++i) {
      if (!runs_.contains({results[i].trial, rung + 1})) {
        return Decision{Decision::Kind::kPromote, results[i].trial, rung + 1};
      }
    }
  }
  const int32_t next = trials_started();
  if (next < options_.max_trials) return Decision{Decision::Kind::kStart, next, 0};
  return Decision{running() > 0 ? Decision::Kind::kWait : Decision::Kind::kDone, -1, 0};
}

}  // namespace tessera
